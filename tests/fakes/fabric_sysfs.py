"""A fake sysfs with GPUs and InfiniBand NICs behind PCIe switches, laid out as the kernel does.

Pass ``root`` as a ``sys_path``. Each PCI function is a directory nested under its
bridges in ``devices/pci<domain>:<bus>/...`` with ``bus/pci/devices/<address>`` a
relative symlink to it; each NIC's RDMA device lives under its PCI function
(``.../<address>/infiniband/mlx5_0``) with ``class/infiniband/mlx5_0`` a symlink
there and ``device`` a symlink back to the function, so resolving either gives
the bridge chain the reader walks. Files hold the kernel's text
(``4: ACTIVE``, ``200 Gb/sec (4X HDR)``, ``32.0 GT/s PCIe``, the AER tables).
Every write replaces a file whole (a reader never sees half of one).

:meth:`FabricSysfs.node` builds ``count`` GPUs, each with one NIC beside it behind
its own PCIe switch: GPU ``i`` at bus ``0x18 + 0x0C * i`` (where the fake NVML
puts it), NIC ``mlx5_<i>`` on the next bus, the first half on NUMA node 0 and the
rest on node 1.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NVIDIA, AMD, MELLANOX, INTEL = 0x10DE, 0x1002, 0x15B3, 0x8086
CLASS_3D = 0x030200
CLASS_AUDIO = 0x040300
CLASS_BRIDGE = 0x060400  # PCI-to-PCI bridge: root ports, switch ports
CLASS_HOST_BRIDGE = 0x060000
CLASS_INFINIBAND = 0x020700
GEN5 = "32.0 GT/s PCIe"
GEN4 = "16.0 GT/s PCIe"
GEN1 = "2.5 GT/s PCIe"

COR_LINES = (
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
)
UNCOR_LINES = (
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
)
STD_COUNTERS = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)
HW_COUNTERS = (
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_remote_access_errors",
    "resp_cqe_error",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_slow_restart",
    "rp_cnp_handled",
)


def write(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` whole (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def aer_text(lines: Sequence[str], total: str, count: int) -> str:
    """An aer_dev_* file: every error type at 0 but the first, which holds ``count``."""
    body = [f"{name} {count if i == 0 else 0}" for i, name in enumerate(lines)]
    return "\n".join([*body, f"{total} {count}"]) + "\n"


@dataclass(frozen=True)
class Pair:
    """One GPU and its NIC behind one switch, as :meth:`FabricSysfs.node` lays them."""

    gpu: str
    nic: str
    nic_address: str
    switch: str
    root_port: str
    numa_node: int


class FabricSysfs:
    """Builds and changes the tree under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bus = root / "bus" / "pci" / "devices"
        self.ib = root / "class" / "infiniband"
        self.bus.mkdir(parents=True, exist_ok=True)
        self.paths: dict[str, Path] = {}
        self.pairs: list[Pair] = []

    # -- PCI functions -----------------------------------------------------------

    def function(
        self,
        chain: Sequence[str],
        vendor: int,
        pci_class: int,
        *,
        numa: int = 0,
        speed: str = GEN5,
        max_speed: str = GEN5,
        width: int = 16,
        max_width: int = 16,
        aer: bool = True,
    ) -> Path:
        """The function at ``chain[-1]`` under host bridge ``chain[0]`` and bridges between.

        Bridges on the way that do not exist yet are made (class 0x060400, x16 Gen5).
        """
        parent = self.root / "devices" / chain[0]
        for at, address in enumerate(chain[1:], start=1):
            here = parent / address
            if address not in self.paths:
                last = at == len(chain) - 1
                here.mkdir(parents=True, exist_ok=True)
                self.paths[address] = here
                write(here / "vendor", f"0x{(vendor if last else 0x1000):04x}\n")
                write(here / "class", f"0x{(pci_class if last else CLASS_BRIDGE):06x}\n")
                write(here / "numa_node", f"{numa}\n")
                if last:
                    self.set_link(
                        address, speed=speed, max_speed=max_speed, width=width, max_width=max_width
                    )
                else:
                    self.set_link(address)
                if aer:
                    self.set_aer(address)
                link = self.bus / address
                link.symlink_to(os.path.relpath(here, self.bus))
            parent = here
        return parent

    def set_link(
        self,
        address: str,
        *,
        speed: str = GEN5,
        max_speed: str = GEN5,
        width: int | str = 16,
        max_width: int | str = 16,
    ) -> None:
        """The link attributes, as the kernel prints them (a str is written as given)."""
        d = self.paths[address]
        write(d / "current_link_speed", f"{speed}\n")
        write(d / "max_link_speed", f"{max_speed}\n")
        write(d / "current_link_width", f"{width}\n")
        write(d / "max_link_width", f"{max_width}\n")

    def set_aer(
        self, address: str, correctable: int = 0, nonfatal: int = 0, fatal: int = 0
    ) -> None:
        """The three AER tables with these totals."""
        d = self.paths[address]
        write(d / "aer_dev_correctable", aer_text(COR_LINES, "TOTAL_ERR_COR", correctable))
        write(d / "aer_dev_nonfatal", aer_text(UNCOR_LINES, "TOTAL_ERR_NONFATAL", nonfatal))
        write(d / "aer_dev_fatal", aer_text(UNCOR_LINES, "TOTAL_ERR_FATAL", fatal))

    # -- NICs ----------------------------------------------------------------------

    def nic(
        self,
        name: str,
        chain: Sequence[str],
        *,
        numa: int = 0,
        ports: int = 1,
        guid: str = "0c42:a103:0065:d1a2",
        firmware: str = "28.39.1002",
        link_layer: str = "InfiniBand",
        rate: str = "200 Gb/sec (4X HDR)",
    ) -> Path:
        """An RDMA device ``name`` on the function at ``chain[-1]``, its ports ACTIVE."""
        function = self.function(chain, MELLANOX, CLASS_INFINIBAND, numa=numa)
        dev = function / "infiniband" / name
        dev.mkdir(parents=True)
        write(dev / "node_guid", f"{guid}\n")
        write(dev / "fw_ver", f"{firmware}\n")
        write(dev / "hca_type", "MT4129\n")
        write(dev / "node_type", "1: CA\n")
        (dev / "device").symlink_to(os.path.relpath(function, dev))
        for number in range(1, ports + 1):
            port = dev / "ports" / str(number)
            write(port / "state", "4: ACTIVE\n")
            write(port / "phys_state", "5: LinkUp\n")
            write(port / "rate", f"{rate}\n")
            write(port / "link_layer", f"{link_layer}\n")
            write(port / "lid", "0x12\n")
            for counter in STD_COUNTERS:
                write(port / "counters" / counter, "0\n")
            for counter in HW_COUNTERS:
                write(port / "hw_counters" / counter, "0\n")
        self.ib.mkdir(parents=True, exist_ok=True)
        (self.ib / name).symlink_to(os.path.relpath(dev, self.ib))
        return dev

    def port_dir(self, name: str, port: int = 1) -> Path:
        """``class/infiniband/<name>/ports/<port>`` (through the class symlink)."""
        return self.ib / name / "ports" / str(port)

    def counter(self, name: str, counter: str, port: int = 1) -> int:
        """A standard counter's value now."""
        return int((self.port_dir(name, port) / "counters" / counter).read_text())

    def set_counter(
        self, name: str, counter: str, value: int | str, port: int = 1, *, hw: bool = False
    ) -> None:
        """Write a counter (``hw``: under hw_counters)."""
        where = "hw_counters" if hw else "counters"
        write(self.port_dir(name, port) / where / counter, f"{value}\n")

    def port_down(self, name: str, port: int = 1, *, link_downed: bool = True) -> None:
        """The port loses its link: DOWN / Polling, and link_downed grows (an error down)."""
        d = self.port_dir(name, port)
        if link_downed:
            self.set_counter(name, "link_downed", self.counter(name, "link_downed", port) + 1, port)
        write(d / "state", "1: DOWN\n")
        write(d / "phys_state", "2: Polling\n")

    def port_up(self, name: str, port: int = 1) -> None:
        """The port is ACTIVE / LinkUp again."""
        d = self.port_dir(name, port)
        write(d / "phys_state", "5: LinkUp\n")
        write(d / "state", "4: ACTIVE\n")

    def remove_nic(self, name: str) -> None:
        """The NIC falls off the bus: its RDMA device and its PCI function are gone."""
        dev = (self.ib / name).resolve()
        function = dev.parent.parent
        address = function.name
        (self.ib / name).unlink()
        (self.bus / address).unlink()
        shutil.rmtree(function)
        del self.paths[address]

    # -- whole nodes ---------------------------------------------------------------

    def node(self, count: int, vendor: int = NVIDIA) -> list[Pair]:
        """``count`` GPU/NIC pairs, each behind its own PCIe switch (module doc)."""
        self.function(("pci0000:00", "0000:00:00.0"), INTEL, CLASS_HOST_BRIDGE, aer=False)
        for i in range(count):
            gpu_bus = 0x18 + 0x0C * i
            root_bus = gpu_bus - 3
            numa = 0 if i < (count + 1) // 2 else 1
            host = f"pci0000:{root_bus:02x}"
            root_port = f"0000:{root_bus:02x}:01.0"
            upstream = f"0000:{root_bus + 1:02x}:00.0"
            gpu_down = f"0000:{root_bus + 2:02x}:00.0"
            nic_down = f"0000:{root_bus + 2:02x}:01.0"
            gpu = f"0000:{gpu_bus:02x}:00.0"
            nic_address = f"0000:{gpu_bus + 1:02x}:00.0"
            self.function((host, root_port, upstream, gpu_down, gpu), vendor, CLASS_3D, numa=numa)
            # The GPU's audio function: same vendor, not an accelerator.
            self.function(
                (host, root_port, upstream, gpu_down, gpu[:-1] + "1"),
                vendor,
                CLASS_AUDIO,
                numa=numa,
                aer=False,
            )
            name = f"mlx5_{i}"
            self.nic(
                name,
                (host, root_port, upstream, nic_down, nic_address),
                numa=numa,
                guid=f"0c42:a103:00{i:02x}:d1a2",
            )
            self.pairs.append(Pair(gpu, name, nic_address, upstream, root_port, numa))
        return self.pairs
