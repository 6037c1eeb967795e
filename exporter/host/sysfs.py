"""The one reader of the host's sysfs and /dev: PCI functions, device nodes, attributes.

Three parts of the daemon count hardware without a vendor library: the PCI census
beside every device source (``exporter.sources.pci``), the TPU chips
(``exporter.host.tpu_chips``) and the Neuron devices (``exporter.host.neuron_devices``).
They read the same tree the same way through this module: what a PCI function is,
how an attribute is read (short, ASCII, never trusted to exist), how a device node
is numbered. Paths are joined under a configurable root, as a container mounts the
host's ``/`` elsewhere. Pure reading: sysfs files that clear on write are never opened
for writing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# domain:bus:device.function, as sysfs names a PCI function.
BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class SysfsError(Exception):
    """A directory that should list devices cannot be read, or an attribute is not a number."""


def read_attr(path: Path, limit: int = 128) -> str:
    """A sysfs attribute's text, stripped and cut to ``limit``; "" when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[:limit]
    except OSError:
        return ""


def hex_attr(path: Path) -> int:
    """A hexadecimal attribute (``vendor``, ``class``); SysfsError when unreadable or not hex."""
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise SysfsError(f"{path}: {exc}") from None


def link_name(path: Path) -> str:
    """The name a symlink resolves to (an IOMMU group's number, a device's address); "" if none."""
    try:
        return path.resolve(strict=True).name
    except (OSError, RuntimeError):
        return ""


@dataclass(frozen=True)
class PciFunction:
    """One entry of ``sys/bus/pci/devices``: its address (lower case) and its directory."""

    address: str
    path: Path

    @property
    def slot(self) -> str:
        """domain:bus:device; the functions of one slot are one physical device."""
        return self.address.rsplit(".", 1)[0]

    def attr(self, name: str, limit: int = 64) -> str:
        """An attribute's text ("" when unreadable)."""
        return read_attr(self.path / name, limit)

    def hex(self, name: str) -> int:
        """A hexadecimal attribute; SysfsError when unreadable."""
        return hex_attr(self.path / name)

    @property
    def is_virtual(self) -> bool:
        """An SR-IOV virtual function (its ``physfn`` link names the physical one)."""
        return (self.path / "physfn").exists()

    def iommu_group(self) -> int | None:
        """The IOMMU group number (its /dev/vfio node), None without one."""
        name = link_name(self.path / "iommu_group")
        return int(name) if name.isdigit() else None


def pci_functions(sys_path: Path) -> list[PciFunction]:
    """Every PCI function under ``<sys_path>/bus/pci/devices``, in bus order.

    ``sys_path`` is where sysfs is mounted (``/sys``, or the host's under a
    container's mount). SysfsError when the directory cannot be listed; entries
    not named as a PCI address are skipped.
    """
    base = sys_path / "bus" / "pci" / "devices"
    try:
        names = sorted(os.listdir(base), key=str.lower)
    except OSError as exc:
        raise SysfsError(f"{base}: {exc.strerror or exc}") from None
    return [PciFunction(name.lower(), base / name) for name in names if BDF.match(name)]


def pci_present(sys_path: Path, address: str) -> bool:
    """Whether the PCI function at ``address`` is still on the bus (hot-unplugged, fallen off)."""
    return (sys_path / "bus" / "pci" / "devices" / address).exists()


def numbered_nodes(directory: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    """Entries of ``directory`` whose name ``pattern`` matches, by the number in group 1.

    Empty when the directory cannot be listed (no such devices on this host).
    """
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError:
        return {}
    found: dict[int, Path] = {}
    for name in names:
        m = pattern.match(name)
        if m:
            found[int(m.group(1))] = directory / name
    return found
