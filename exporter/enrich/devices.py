"""The devices and GPU processes the device sources last reported, and device-ID matching.

Device plugins name devices in several ways; :meth:`DeviceIndex.resolve` accepts
each of them:

* a UUID (``GPU-...``, NVIDIA's default ``deviceIDStrategy: uuid``), also with a
  time-slicing or MPS replica suffix (``GPU-...::3``);
* a MIG device UUID (``MIG-...``) when the device source reported the MIG device;
* a PCI bus ID (AMD's device plugin), in any domain width or case;
* an index (``deviceIDStrategy: index``: ``"2"``, or ``"2:1"`` for a MIG slice of GPU 2);
* a device node name (``nvidia2``, GKE), taken as the index (the device minor number
  equals the index on nearly every system; a node where it does not should use UUIDs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.catalog.device import INFO_LABELS
from exporter.model import Reading

_PCI = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_NODE_NAME = re.compile(r"^nvidia(\d+)$")
_INDEX = re.compile(r"^(\d+)(?::\d+)?$")
_INFO_AT = {name: i for i, name in enumerate(INFO_LABELS)}
# Per-process families (labels device, uuid, pid) a device source may report; a
# process appears in any of them (memory can be "not available" for some).
PROCESS_FAMILIES = ("accel_process_memory_bytes", "accel_process_sm_utilization_ratio")


@dataclass(frozen=True)
class DeviceRef:
    """A device as the device sources name it: index label and UUID."""

    device: str
    uuid: str
    vendor: str = ""
    pci_bus_id: str = ""


@dataclass(frozen=True)
class MigRef:
    """A MIG device: its own UUID, its parent GPU's UUID, and its instance IDs."""

    mig_uuid: str
    parent_uuid: str
    gpu_instance: str
    compute_instance: str


def normalise_pci(bus_id: str) -> str | None:
    """``0000:17:00.0`` and ``00000000:17:00.0`` -> ``0000:17:00.0``; None if not a bus ID."""
    match = _PCI.match(bus_id.strip())
    if match is None:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


class DeviceIndex:
    """Devices by every name a device plugin might use, and the GPU processes on each."""

    def __init__(
        self,
        devices: Iterable[DeviceRef],
        processes: Iterable[tuple[str, int]] = (),
        migs: Iterable[MigRef] = (),
    ) -> None:
        self.devices = sorted(set(devices), key=lambda d: (d.vendor, _index_key(d.device), d.uuid))
        self._by_uuid = {d.uuid.lower(): d for d in self.devices}
        self._by_pci = {}
        for dev in self.devices:
            pci = normalise_pci(dev.pci_bus_id) if dev.pci_bus_id else None
            if pci is not None:
                self._by_pci[pci] = dev
        self._by_index: dict[str, DeviceRef] = {}
        for dev in self.devices:
            # With two vendors on one node indices collide; then no index is trusted.
            if dev.device in self._by_index:
                self._by_index[dev.device] = DeviceRef("", "")
            else:
                self._by_index[dev.device] = dev
        self._migs: dict[str, MigRef] = {}
        for mig in migs:
            found = self._by_uuid.get(mig.parent_uuid.lower())
            if found is not None:
                self._by_uuid[mig.mig_uuid.lower()] = found
                self._migs[mig.mig_uuid.lower()] = mig
        pids: dict[str, set[int]] = {}
        for uuid, pid in processes:
            if uuid.lower() in self._by_uuid:
                pids.setdefault(self._by_uuid[uuid.lower()].uuid, set()).add(pid)
        self.processes = {uuid: sorted(found) for uuid, found in pids.items()}

    @classmethod
    def from_readings(
        cls,
        info: Iterable[Reading],
        processes: Iterable[Reading] = (),
        migs: Iterable[Reading] = (),
    ) -> DeviceIndex:
        """Build from the device sources' readings.

        ``info``: accel_device_info; ``processes``: accel_process_memory_bytes;
        ``migs``: accel_mig_device_info (device, uuid, gpu_instance,
        compute_instance, mig_uuid).
        """
        devices = []
        for reading in info:
            labels = reading.labels
            if len(labels) != len(INFO_LABELS):
                continue
            devices.append(
                DeviceRef(
                    device=labels[_INFO_AT["device"]],
                    uuid=labels[_INFO_AT["uuid"]],
                    vendor=labels[_INFO_AT["vendor"]],
                    pci_bus_id=labels[_INFO_AT["pci_bus_id"]],
                )
            )
        pairs = []
        for reading in processes:
            if len(reading.labels) >= 3 and reading.labels[2].isdigit():
                pairs.append((reading.labels[1], int(reading.labels[2])))
        mig_refs = [
            MigRef(r.labels[4], r.labels[1], r.labels[2], r.labels[3])
            for r in migs
            if len(r.labels) == 5 and r.labels[4]
        ]
        return cls(devices, pairs, mig_refs)

    def resolve(self, device_id: str) -> DeviceRef | None:
        """The device a device plugin's ID names, or None."""
        raw = device_id.strip()
        base = raw.split("::", 1)[0]
        found = self._by_uuid.get(base.lower())
        if found is not None:
            return found
        pci = normalise_pci(base)
        if pci is not None:
            return self._by_pci.get(pci)
        node = _NODE_NAME.match(base)
        index = node.group(1) if node else None
        if index is None:
            plain = _INDEX.match(base)
            index = plain.group(1) if plain else None
        if index is not None:
            dev = self._by_index.get(index)
            return dev if dev is not None and dev.uuid else None
        return None

    def mig(self, device_id: str) -> MigRef | None:
        """The MIG device a device plugin's ID names (MIG UUID form only), or None."""
        return self._migs.get(device_id.strip().split("::", 1)[0].lower())

    def by_uuid(self, uuid: str) -> DeviceRef | None:
        """The device with this UUID (or the parent of this MIG UUID)."""
        return self._by_uuid.get(uuid.lower())


def _index_key(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)
