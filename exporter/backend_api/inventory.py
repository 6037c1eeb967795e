"""Device identities made the same way by a worker's backend and by a host reader.

The Neuron devices are counted from sysfs in the daemon (:mod:`exporter.host.neuron_devices`),
the others by a backend in a worker; both give each device a uuid unique in its inventory
here, so the daemon sees the same kind of identity from either side.
"""

from __future__ import annotations

from collections.abc import Sequence


def unique_uuids(devices: Sequence[tuple[str, str]], missing: str) -> list[str]:
    """The uuid of each ``(device, uuid)``, made unique within the inventory.

    A device without one gets ``<missing><device>``; a uuid seen before (a
    firmware or virtualization fault, a mock) becomes ``<uuid>-<device>``, so
    both devices stay visible instead of the daemon rejecting the inventory.
    """
    seen: set[str] = set()
    out = []
    for device, uuid in devices:
        if not uuid:
            uuid = f"{missing}{device}"
        elif uuid in seen:
            uuid = f"{uuid}-{device}"
        seen.add(uuid)
        out.append(uuid)
    return out
