"""Helpers every backend shares; the protocol a backend fulfils is in the layer below.

The :class:`Backend` protocol and its errors live in :mod:`exporter.backend_api.backend`,
which the worker process imports too (a worker imports no backend module); they
are named here as well so that a backend finds all it builds on in one import.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.backend_api.backend import (
    INVENTORY_CHANGED,
    Backend,
    BackendError,
    BackendUnavailable,
    InventoryChanged,
)

__all__ = [
    "INVENTORY_CHANGED",
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "InventoryChanged",
    "unique_uuids",
]


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
