"""TPU chips as the host sees them: PCI functions of Google's vendor id, or /dev/accelN.

The libtpu metric service only answers while a workload holds the chips, so
the chips themselves are counted from the host: ``sys/bus/pci/devices/*`` with
vendor ``0x1ae0`` under a configurable root (a container mounts the host's
``/`` elsewhere). The functions of one PCI device are one chip's cores; chips
are numbered as libtpu numbers them, by their device node (``/dev/vfio/<iommu
group>`` on v5e and later, ``/dev/accelN`` before). Without sysfs PCI entries the
``/dev/accelN`` nodes alone still count the chips, without a model.

Pure file reading: no vendor library, nothing written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exporter.host.sysfs import SysfsError, numbered_nodes, pci_functions, pci_present

GOOGLE_PCI_VENDOR = "0x1ae0"

# PCI device id -> (model, runtime devices per chip). 0x0027 is v2 or v3 by subsystem id.
_MODELS: dict[str, tuple[str, int]] = {
    "0x005e": ("TPU v4", 1),
    "0x0063": ("TPU v5e", 1),
    "0x0062": ("TPU v5p", 1),
    "0x006f": ("TPU v6e", 1),
    "0x0076": ("TPU 7x", 2),
}
_V2_V3 = {"0x004e": ("TPU v2", 2), "0x004f": ("TPU v3", 2)}
# Chips the host hands to the workload through VFIO (/dev/vfio/<group>); older ones are /dev/accelN.
_VFIO = frozenset({"0x0063", "0x0062", "0x006f", "0x0076"})
_ACCEL = re.compile(r"^accel(\d+)$")


@dataclass(frozen=True)
class Chip:
    """One TPU chip: its PCI address (identity), model, device node and runtime devices."""

    pci_bus_id: str
    model: str
    node: str
    # How many libtpu "devices" (TensorCores addressed separately) the chip has.
    devices_per_chip: int
    # Sort key: the number in the device node, as libtpu orders chips.
    order: int


def _model(device_id: str, subsystem: str) -> tuple[str, int]:
    if device_id == "0x0027":
        return _V2_V3.get(subsystem, ("TPU v2/v3", 2))
    return _MODELS.get(device_id, (f"TPU (PCI device {device_id})" if device_id else "TPU", 1))


def _pci_chips(root: Path) -> list[Chip]:
    try:
        functions = pci_functions(root / "sys")
    except SysfsError:
        return []
    chips: dict[str, Chip] = {}
    for function in functions:
        if function.attr("vendor").lower() != GOOGLE_PCI_VENDOR:
            continue
        if function.slot in chips:
            continue  # the functions of one device are one chip's cores
        device_id = function.attr("device").lower()
        model, per_chip = _model(device_id, function.attr("subsystem_device").lower())
        group = function.iommu_group() if device_id in _VFIO else None
        if group is not None:
            node, order = f"/dev/vfio/{group}", group
        else:
            node, order = "", -1
        chips[function.slot] = Chip(function.address, model, node, per_chip, order)
    found = list(chips.values())
    accels = _accel_nodes(root)
    # Chips without a vfio group are served through /dev/accelN, numbered in PCI order.
    plain = [c for c in found if c.order < 0]
    for i, chip in enumerate(plain):
        number = accels[i] if i < len(accels) else i
        found[found.index(chip)] = Chip(
            chip.pci_bus_id, chip.model, f"/dev/accel{number}", chip.devices_per_chip, number
        )
    return sorted(found, key=lambda c: (c.order, c.pci_bus_id))


def _accel_nodes(root: Path) -> list[int]:
    return sorted(numbered_nodes(root / "dev", _ACCEL))


def scan(host_root: str) -> list[Chip]:
    """The host's TPU chips in libtpu's order (empty when there are none)."""
    root = Path(host_root or "/")
    chips = _pci_chips(root)
    if chips:
        return chips
    return [Chip("", "TPU", f"/dev/accel{n}", 1, n) for n in _accel_nodes(root)]


def present(host_root: str, chip: Chip) -> bool:
    """Whether the chip is still on the host (its PCI entry, else its device node)."""
    root = Path(host_root or "/")
    if chip.pci_bus_id:
        return pci_present(root / "sys", chip.pci_bus_id)
    return (root / chip.node.lstrip("/")).exists()
