"""Accelerators on the PCI bus, from sysfs: the ground truth a vendor library cannot give.

A GPU whose driver is broken, missing or never injected into the container is
invisible to NVML and amdsmi: they cannot say what they cannot see. The bus
can. Each function under ``<sys>/bus/pci/devices`` has a ``vendor`` and a
``class``; accelerators are display controllers (class 0x03xxxx: VGA, 3D,
other) and processing accelerators (0x1200xx). That leaves out NVSwitches
(bridges, 0x0680), the audio function of a GPU (0x0403) and every other
device of the same vendor. Virtual functions (an SR-IOV GPU's VFs, marked by a
``physfn`` link) are not counted on the host that owns the physical function.
"""

from __future__ import annotations

from pathlib import Path

from exporter.host.sysfs import SysfsError, pci_functions
from exporter.vendors import VENDORS

# PCI vendor ids by the vendor label the device sources use (exporter.vendors).
VENDOR_IDS: dict[str, int] = {
    vendor.label: vendor.pci_vendor for vendor in VENDORS if vendor.pci_vendor
}
DISPLAY_CLASS = 0x03
ACCELERATOR_CLASS = 0x1200


# sysfs could not be read, or says something that is not a PCI device list.
PciError = SysfsError


def is_accelerator(pci_class: int) -> bool:
    """Display controllers of every kind and processing accelerators."""
    return pci_class >> 16 == DISPLAY_CLASS or pci_class >> 8 == ACCELERATOR_CLASS


def accelerators(sys_path: str, vendor: str) -> list[str]:
    """The bus addresses of ``vendor``'s accelerators, in bus order.

    PciError when the device list cannot be read, or when a function of this
    vendor has no readable class (an odd sysfs is reported, not guessed at).
    """
    want = VENDOR_IDS.get(vendor)
    if want is None:
        raise PciError(f"no PCI vendor id known for {vendor!r}")
    found = []
    for function in pci_functions(Path(sys_path)):
        try:
            vendor_id = function.hex("vendor")
        except PciError:
            continue  # a function that vanished while we looked, or not a device
        if vendor_id != want:
            continue
        if is_accelerator(function.hex("class")) and not function.is_virtual:
            found.append(function.address)
    return found


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` (NVML's 8-digit domain) and ``0000:3b:00.0`` (sysfs) alike."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or rest.count(":") != 1:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text
