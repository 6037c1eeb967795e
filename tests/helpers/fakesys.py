"""A fake sysfs PCI tree: ``<root>/bus/pci/devices/<address>/{vendor,class}`` as the kernel lays it."""

from __future__ import annotations

from pathlib import Path

NVIDIA, AMD, INTEL, MELLANOX = 0x10DE, 0x1002, 0x8086, 0x15B3
CLASS_3D = 0x030200  # an H100 (3D controller)
CLASS_VGA = 0x030000
CLASS_DISPLAY_OTHER = 0x038000  # an MI300X
CLASS_ACCELERATOR = 0x120000
CLASS_BRIDGE_OTHER = 0x068000  # an NVSwitch
CLASS_AUDIO = 0x040300  # a GPU's HDMI audio function
CLASS_ETHERNET = 0x020000


class FakeSys:
    """Writes PCI functions under ``root`` (pass ``root`` as a ``sys_path``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "bus" / "pci" / "devices"
        self.devices.mkdir(parents=True, exist_ok=True)

    def add(self, address: str, vendor: int, pci_class: int, *, virtfn: bool = False) -> Path:
        d = self.devices / address
        d.mkdir(parents=True, exist_ok=True)
        (d / "vendor").write_text(f"0x{vendor:04x}\n")
        (d / "class").write_text(f"0x{pci_class:06x}\n")
        if virtfn:
            (d / "physfn").symlink_to(self.devices)
        return d

    def gpu_node(
        self, vendor: int, count: int, pci_class: int = CLASS_3D, step: int = 0x0C
    ) -> list[str]:
        """``count`` GPUs with the functions a real node has beside them; their addresses.

        GPU ``i`` is on bus ``0x18 + step * i``, where the fake NVML puts it.
        """
        addresses = []
        for i in range(count):
            address = f"0000:{0x18 + step * i:02x}:00.0"
            self.add(address, vendor, pci_class)
            self.add(f"0000:{0x18 + step * i:02x}:00.1", vendor, CLASS_AUDIO)
            addresses.append(address)
        self.add("0000:05:00.0", vendor, CLASS_BRIDGE_OTHER)  # NVSwitch-like bridge
        self.add("0000:06:00.0", MELLANOX, CLASS_ETHERNET)
        self.add("0000:00:02.0", INTEL, CLASS_VGA)  # the BMC's or the CPU's own display
        return addresses
