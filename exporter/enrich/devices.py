"""The devices and GPU processes the device sources last reported, and device-ID matching.

Device plugins name devices in several ways; :meth:`DeviceIndex.resolve` accepts
each of them:

* a UUID (``GPU-...``, NVIDIA's default ``deviceIDStrategy: uuid``), also with a
  time-slicing or MPS replica suffix (``GPU-...::3``);
* a MIG device UUID (``MIG-...``) when the device source reported the MIG device;
* a PCI bus ID (AMD's device plugin), in any domain width or case;
* an index (``deviceIDStrategy: index``: ``"2"``, or ``"2:1"`` for a MIG slice of GPU 2);
* a device node name (``nvidia2``, GKE), taken as the index (the device minor number
  equals the index on nearly every system; a node where it does not should use UUIDs),
  also with GKE's time-sharing suffix (``nvidia2/vgpu3``: a share of GPU 2) and GKE's
  MIG form (``nvidia2/gi1``, ``nvidia2/gi1/vgpu0``: the MIG device of GPU 2 whose GPU
  instance is 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.catalog.device import INFO_LABELS
from exporter.family_names import ACCEL_PROCESS_MEMORY_BYTES, ACCEL_PROCESS_SM_UTILIZATION_RATIO
from exporter.model import Reading

_PCI = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
# GKE: nvidia<index>, optionally /gi<GPU instance> (MIG), optionally /vgpu<n> (a share).
_NODE_NAME = re.compile(r"^nvidia(\d+)(?:/gi(\d+))?(?:/vgpu\d+)?$")
_INDEX = re.compile(r"^(\d+)(?::\d+)?$")
_INFO_AT = {name: i for i, name in enumerate(INFO_LABELS)}
# Per-process families (labels device, uuid, pid) a device source may report; a
# process appears in any of them (memory can be "not available" for some).
PROCESS_FAMILIES = (ACCEL_PROCESS_MEMORY_BYTES, ACCEL_PROCESS_SM_UTILIZATION_RATIO)


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
        self._migs_of: dict[str, list[MigRef]] = {}
        for mig in migs:
            found = self._by_uuid.get(mig.parent_uuid.lower())
            if found is None:
                continue
            self._migs_of.setdefault(found.uuid, []).append(mig)
            if mig.mig_uuid:
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
        compute_instance, mig_uuid, profile).
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
        # A MIG device without a UUID is still named by GKE's nvidia<n>/gi<g> form.
        mig_refs = [
            MigRef(r.labels[4], r.labels[1], r.labels[2], r.labels[3])
            for r in migs
            if len(r.labels) >= 5
        ]
        return cls(devices, pairs, mig_refs)

    def resolve(self, device_id: str) -> DeviceRef | None:
        """The device a device plugin's ID names (the parent GPU of a MIG device), or None."""
        raw = device_id.strip()
        base = raw.split("::", 1)[0]
        found = self._by_uuid.get(base.lower()) if base else None
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

    def migs(self, device_id: str) -> tuple[MigRef, ...]:
        """The MIG devices a device plugin's ID names: by MIG UUID, or GKE's ``nvidiaN/giG``.

        Empty for an ID that names a whole GPU or nothing. GKE names a GPU instance,
        which holds one MIG device per compute instance (usually one).
        """
        base = device_id.strip().split("::", 1)[0]
        by_uuid = self._migs.get(base.lower())
        if by_uuid is not None:
            return (by_uuid,)
        node = _NODE_NAME.match(base)
        if node is None or node.group(2) is None:
            return ()
        parent = self.resolve(base)
        if parent is None:
            return ()
        gi = node.group(2)
        return tuple(m for m in self._migs_of.get(parent.uuid, ()) if m.gpu_instance == gi)

    def by_uuid(self, uuid: str) -> DeviceRef | None:
        """The device with this UUID (or the parent of this MIG UUID)."""
        return self._by_uuid.get(uuid.lower())


def _index_key(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)
