"""DRA devices of this node: which (driver, pool, device) is which GPU, from ResourceSlices.

Dynamic Resource Allocation (``resource.k8s.io/v1``, GA in Kubernetes 1.34) names
an allocated device by its driver, pool and device name; the kubelet's
pod-resources ``List`` reports exactly that triple per claim. The hardware
identity is only in the ResourceSlice the driver published for the device, as
attributes. Each vendor's DRA driver spells it differently:

* NVIDIA (``gpu.nvidia.com``, k8s-dra-driver-gpu): ``uuid`` (``GPU-...``, or
  ``MIG-...`` for a MIG device, with ``parentUUID``) and ``pcieBusID``;
* AMD (``gpu.amd.com``, ROCm/k8s-gpu-dra-driver): no UUID; the standard
  ``resource.kubernetes.io/pciBusID`` (a partition carries its parent's), and
  ``pciAddr`` on auto-partition devices;
* Intel (``gpu.intel.com``, ``gaudi.intel.com``): ``pciAddress`` (deprecated)
  and ``resource.kubernetes.io/pciBusID``.

Attribute names without a domain belong to the slice's driver, so ``uuid`` and
``gpu.nvidia.com/uuid`` are the same attribute. A UUID identifies a device
better than a PCI address (it also tells MIG devices apart), so it is preferred.

Only the newest generation of each pool counts (a driver republishing a pool
leaves older slices behind for a moment). Nothing here raises for bad data: a
device without an identifying attribute is kept (its claim is then counted as
``dra_no_identity``), a slice that is not an object is skipped and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.enrich.devices import normalise_pci

# The standard attribute (KEP-4381/5304) every DRA driver may publish for PCI devices.
STANDARD_PCI = "resource.kubernetes.io/pciBusID"
# Attribute names (in the driver's domain unless qualified) that carry a UUID,
# the parent GPU's UUID, and a PCI bus address, in order of preference.
UUID_KEYS = ("uuid",)
PARENT_KEYS = ("parentUUID",)
PCI_KEYS = (STANDARD_PCI, "pcieBusID", "pciAddress", "pciAddr")


@dataclass(frozen=True, order=True)
class DraDevice:
    """A device as DRA names it: its driver, the pool it is in, and its name there."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class SliceDevice:
    """What the node's ResourceSlices say about one DRA device.

    ``uuid`` is the device's own (a MIG device's ``MIG-...``), ``parent_uuid`` the
    physical GPU's when the device is a partition of one; either may be empty.
    """

    ref: DraDevice
    uuid: str = ""
    parent_uuid: str = ""
    pci_bus_id: str = ""

    @property
    def identified(self) -> bool:
        """Whether anything here can be matched to a device the device sources report."""
        return bool(self.uuid or self.parent_uuid or self.pci_bus_id)


def _attribute(attributes: Mapping[str, Any], driver: str, keys: Iterable[str]) -> str:
    """The first string value among ``keys`` (plain or qualified with the driver)."""
    for key in keys:
        for name in (key, f"{driver}/{key}"):
            value = attributes.get(name)
            if isinstance(value, dict):
                text = value.get("string")
                if isinstance(text, str) and text:
                    return text
    return ""


def _devices_of(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return []
    return [d for d in devices if isinstance(d, dict)]


class DraIndex:
    """The node's DRA devices by (driver, pool, device), and by UUID."""

    def __init__(self, devices: Iterable[SliceDevice] = ()) -> None:
        self.devices: dict[DraDevice, SliceDevice] = {}
        self._by_uuid: dict[str, DraDevice] = {}
        self._by_pci: dict[str, list[DraDevice]] = {}
        for dev in devices:
            self.devices[dev.ref] = dev
            if dev.uuid:
                self._by_uuid[dev.uuid.lower()] = dev.ref
            pci = normalise_pci(dev.pci_bus_id) if dev.pci_bus_id else None
            if pci is not None:
                self._by_pci.setdefault(pci, []).append(dev.ref)
        self.drivers = frozenset(ref.driver for ref in self.devices)

    @classmethod
    def from_slices(cls, slices: Iterable[Any]) -> tuple[DraIndex, Counter[str]]:
        """Index the ``items`` of a ResourceSliceList; the counter holds what was skipped."""
        errors: Counter[str] = Counter()
        newest: dict[tuple[str, str], int] = {}
        usable: list[tuple[str, str, int, Mapping[str, Any]]] = []
        for item in slices:
            spec = item.get("spec") if isinstance(item, dict) else None
            pool = spec.get("pool") if isinstance(spec, dict) else None
            driver = spec.get("driver") if isinstance(spec, dict) else None
            if not isinstance(spec, dict) or not isinstance(pool, dict) or not driver:
                errors["dra_bad_slice"] += 1
                continue
            name, generation = pool.get("name"), pool.get("generation", 0)
            if not isinstance(name, str) or not isinstance(driver, str):
                errors["dra_bad_slice"] += 1
                continue
            generation = generation if isinstance(generation, int) else 0
            key = (driver, name)
            newest[key] = max(newest.get(key, generation), generation)
            usable.append((driver, name, generation, spec))
        found: list[SliceDevice] = []
        for driver, pool_name, generation, spec in usable:
            if generation < newest[(driver, pool_name)]:
                continue  # superseded: the driver is replacing this pool's slices
            for device in _devices_of(spec):
                name = device.get("name")
                if not isinstance(name, str) or not name:
                    errors["dra_bad_slice"] += 1
                    continue
                attributes = device.get("attributes")
                attrs: Mapping[str, Any] = attributes if isinstance(attributes, dict) else {}
                found.append(
                    SliceDevice(
                        DraDevice(driver, pool_name, name),
                        uuid=_attribute(attrs, driver, UUID_KEYS),
                        parent_uuid=_attribute(attrs, driver, PARENT_KEYS),
                        pci_bus_id=_attribute(attrs, driver, PCI_KEYS),
                    )
                )
        return cls(found), errors

    def get(self, ref: DraDevice) -> SliceDevice | None:
        """What the slices say about one allocated device, or None when it is not published."""
        return self.devices.get(ref)

    def by_uuid(self, uuid: str) -> DraDevice | None:
        """The DRA device whose ``uuid`` attribute is ``uuid`` (GPU or MIG), or None."""
        return self._by_uuid.get(uuid.lower())

    def by_pci(self, bus_id: str) -> tuple[DraDevice, ...]:
        """The DRA devices on the PCI function ``bus_id``: a GPU, or each partition of it."""
        pci = normalise_pci(bus_id)
        return tuple(sorted(self._by_pci.get(pci, ()))) if pci is not None else ()

    def resolve(self, uuid: str, pci_bus_id: str = "") -> DraDevice | None:
        """The DRA device a device source's device is, or None when the slices do not say.

        By the driver's uuid attribute (NVIDIA, GPU or MIG), else by the device's PCI
        function ``pci_bus_id`` where the driver names devices by PCI address (AMD,
        Intel) and exactly one DRA device sits there: a partitioned GPU's partitions
        are not told apart by it, so never a guess.
        """
        found = self.by_uuid(uuid)
        if found is not None or not pci_bus_id:
            return found
        at = self.by_pci(pci_bus_id)
        return at[0] if len(at) == 1 else None

    def __len__(self) -> int:
        return len(self.devices)
