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
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


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


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()[:64]
    except OSError:
        return ""


def _model(device_id: str, subsystem: str) -> tuple[str, int]:
    if device_id == "0x0027":
        return _V2_V3.get(subsystem, ("TPU v2/v3", 2))
    return _MODELS.get(device_id, (f"TPU (PCI device {device_id})" if device_id else "TPU", 1))


def _pci_chips(root: Path) -> list[Chip]:
    base = root / "sys" / "bus" / "pci" / "devices"
    try:
        entries = sorted(p for p in base.iterdir() if _BDF.match(p.name))
    except OSError:
        return []
    chips: dict[str, Chip] = {}
    for entry in entries:
        if _read(entry / "vendor").lower() != GOOGLE_PCI_VENDOR:
            continue
        slot = entry.name.rsplit(".", 1)[0]  # domain:bus:device; functions are cores
        if slot in chips:
            continue
        device_id = _read(entry / "device").lower()
        model, per_chip = _model(device_id, _read(entry / "subsystem_device").lower())
        group = _iommu_group(entry) if device_id in _VFIO else None
        if group is not None:
            node, order = f"/dev/vfio/{group}", group
        else:
            node, order = "", -1
        chips[slot] = Chip(entry.name.lower(), model, node, per_chip, order)
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


def _iommu_group(entry: Path) -> int | None:
    try:
        name = (entry / "iommu_group").resolve(strict=True).name
    except (OSError, RuntimeError):
        return None
    return int(name) if name.isdigit() else None


def _accel_nodes(root: Path) -> list[int]:
    try:
        names = [p.name for p in (root / "dev").iterdir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(_ACCEL.match, names) if m)


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
        return (root / "sys" / "bus" / "pci" / "devices" / chip.pci_bus_id).exists()
    return (root / chip.node.lstrip("/")).exists()
