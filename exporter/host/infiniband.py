"""InfiniBand and RoCE ports from ``<sys>/class/infiniband``, as the kernel writes them.

The layout (Documentation/ABI/testing/sysfs-class-infiniband, drivers/infiniband/core/sysfs.c)::

    class/infiniband/mlx5_0 -> ../../devices/pci0000:3a/.../0000:3d:00.0/infiniband/mlx5_0
        device -> ../../../0000:3d:00.0       the NIC's PCI function
        node_guid        0c42:a103:0065:d1a2  four groups of four hex digits
        fw_ver           28.39.1002
        ports/1/state        "4: ACTIVE"      (0 NOP, 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE,
                                               5 ACTIVE_DEFER)
        ports/1/phys_state   "5: LinkUp"      (1 Sleep, 2 Polling, 3 Disabled,
                                               4 PortConfigurationTraining, 5 LinkUp,
                                               6 LinkErrorRecovery, 7 Phy Test)
        ports/1/rate         "200 Gb/sec (4X HDR)"  ("2.5 Gb/sec (1X SDR)", "25 Gb/sec (1X EDR)")
        ports/1/link_layer   InfiniBand | Ethernet (RoCE)
        ports/1/counters/*   decimal; "N/A (no PMA)" where the device has no
                             performance-management agent (node_exporter issue 966)
        ports/1/hw_counters/*  driver counters (mlx5: out_of_buffer, ...), decimal

``port_xmit_data`` and ``port_rcv_data`` count 32-bit words (octets divided by 4,
IBA 16.1.3.5), so they are multiplied by 4 here. The NUMA node is the PCI
function's (``device/numa_node``, -1 where the platform says none).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.catalog.vocabulary import (
    NIC_DATA_DIRECTIONS,
    NIC_ERROR_COUNTERS,
    NIC_HW_COUNTERS,
    NIC_PHYS_STATES,
    NIC_PORT_STATES,
    NIC_UNKNOWN_STATE,
)
from exporter.host.sysfs_read import (
    UNREADABLE,
    VANISHED,
    ParseError,
    ReadProblem,
    Unread,
    listdir,
    malformed,
    read_text,
    resolve,
)

ACTIVE = 4
# The logical and physical port states by the number the kernel writes first.
PORT_STATES = dict(enumerate(NIC_PORT_STATES))
PHYS_STATES = dict(enumerate(NIC_PHYS_STATES))
UNKNOWN_STATE = NIC_UNKNOWN_STATE
ERROR_COUNTERS = NIC_ERROR_COUNTERS
# Data counters, in 4-octet words: (sysfs name, direction).
DATA_COUNTERS = tuple(zip(("port_xmit_data", "port_rcv_data"), NIC_DATA_DIRECTIONS, strict=True))
HW_COUNTERS = NIC_HW_COUNTERS
NO_PMA = "N/A (no PMA)"
T = TypeVar("T")

_ENUM = re.compile(r"^(\d+):\s*(\S.*)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec(?: \(.*\))?$")
_GUID = re.compile(r"^[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){3}$")
_DECIMAL = re.compile(r"^\d+$")
# domain:bus:device.function
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def parse_enum(text: str) -> tuple[int, str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")`` (``state``, ``phys_state``); ParseError if not."""
    m = _ENUM.match(text.strip())
    if not m:
        raise ParseError(f"not '<number>: <name>': {text[:40]!r}")
    return int(m.group(1)), m.group(2).strip()


def parse_rate(text: str) -> float:
    """``"200 Gb/sec (4X HDR)"`` -> 2e11 bits per second; ParseError if not that shape."""
    m = _RATE.match(text.strip())
    if not m:
        raise ParseError(f"not '<n> Gb/sec (...)': {text[:40]!r}")
    # Decimal gigabits: "2.5 Gb/sec" is 2.5e9 (the kernel prints rate / 10 with one decimal).
    whole, _, tenths = m.group(1).partition(".")
    return float(int(whole) * 10**9 + (int(tenths.ljust(9, "0")) if tenths else 0))


def parse_counter(text: str) -> int | None:
    """A decimal counter; None for ``N/A (no PMA)`` (no counter, not zero); ParseError else."""
    value = text.strip()
    if value == NO_PMA:
        return None
    if not _DECIMAL.match(value):
        raise ParseError(f"not a decimal counter: {value[:40]!r}")
    return int(value)


def parse_guid(text: str) -> str:
    """``"0C42:A103:0065:D1A2"`` -> lower case; ParseError when not four groups of four."""
    value = text.strip()
    if not _GUID.match(value):
        raise ParseError(f"not a GUID: {value[:40]!r}")
    return value.lower()


def parse_numa_node(text: str) -> int | None:
    """``"1"`` -> 1; ``"-1"`` (no NUMA information) -> None; ParseError else."""
    value = text.strip()
    try:
        node = int(value)
    except ValueError:
        raise ParseError(f"not a NUMA node: {value[:40]!r}") from None
    return node if node >= 0 else None


@dataclass(frozen=True)
class Port:
    """One port of a NIC as one read found it."""

    number: int
    state_code: int
    state: str
    phys_state_code: int
    phys_state: str
    # Bits per second; None when the rate was unreadable.
    rate: float | None
    link_layer: str
    # Standard counters read (ERROR_COUNTERS and the data counters, in octets for the
    # latter); a counter the device lacks ("N/A (no PMA)", no file) is absent.
    counters: Mapping[str, int] = field(default_factory=dict)
    hw_counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def state_word(self) -> str:
        """The logical state as a label word (``active``; ``unknown`` for a code IBA lacks)."""
        return PORT_STATES.get(self.state_code, UNKNOWN_STATE)

    @property
    def phys_state_word(self) -> str:
        """The physical state as a label word (``link_up``; ``unknown`` when unread)."""
        return PHYS_STATES.get(self.phys_state_code, UNKNOWN_STATE)

    @property
    def up(self) -> bool:
        """The logical state is ACTIVE (traffic can flow)."""
        return self.state_code == ACTIVE


@dataclass(frozen=True)
class Nic:
    """One RDMA device (``mlx5_0``) and its ports."""

    name: str
    # Normalized (lower case); "" when the device link cannot be resolved (a soft device).
    pci_bus_id: str
    # The resolved sysfs path of its PCI function ("" without one): the bridge chain.
    pci_path: str
    node_guid: str
    firmware_version: str
    numa_node: int | None
    ports: tuple[Port, ...]


@dataclass
class NicScan:
    """Every NIC one pass found, and each file it could not use."""

    nics: list[Nic] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)


def _read(path: str, problems: list[ReadProblem]) -> str | None:
    try:
        return read_text(path)
    except Unread as exc:
        problems.append(exc.problem)
        return None


def _optional(path: str, problems: list[ReadProblem]) -> str | None:
    """An attribute some drivers lack: absent is no problem, a failed read is."""
    if not os.path.lexists(path):
        return None
    return _read(path, problems)


def _parsed(
    path: str, text: str | None, parse: Callable[[str], T], problems: list[ReadProblem]
) -> T | None:
    """``parse(text)``, or None with the problem noted (None text: already noted)."""
    if text is None:
        return None
    try:
        return parse(text)
    except ParseError as exc:
        problems.append(malformed(path, exc).problem)
        return None


def _counters(
    directory: str, names: tuple[str, ...], problems: list[ReadProblem]
) -> dict[str, int]:
    """The listed counters among ``names``; a listed file that fails is a problem."""
    present = listdir(directory)
    out: dict[str, int] = {}
    if present is None:
        return out
    listed = set(present)
    for name in names:
        if name not in listed:
            continue
        path = os.path.join(directory, name)
        value = _parsed(path, _read(path, problems), parse_counter, problems)
        if value is not None:
            out[name] = value
    return out


def read_port(directory: str, number: int, problems: list[ReadProblem]) -> Port | None:
    """One port directory; None when its state cannot be read (it vanished, or garbage)."""
    state = _parsed(
        os.path.join(directory, "state"),
        _read(os.path.join(directory, "state"), problems),
        parse_enum,
        problems,
    )
    if state is None:
        return None
    phys_path = os.path.join(directory, "phys_state")
    phys = _parsed(phys_path, _optional(phys_path, problems), parse_enum, problems)
    phys_code, phys_name = phys if phys is not None else (-1, "")
    rate_path = os.path.join(directory, "rate")
    rate = _parsed(rate_path, _optional(rate_path, problems), parse_rate, problems)
    layer = _optional(os.path.join(directory, "link_layer"), problems) or ""
    names = ERROR_COUNTERS + tuple(name for name, _ in DATA_COUNTERS)
    counters = _counters(os.path.join(directory, "counters"), names, problems)
    for name, _ in DATA_COUNTERS:
        if name in counters:
            counters[name] *= 4  # 32-bit words to octets
    hw = _counters(os.path.join(directory, "hw_counters"), HW_COUNTERS, problems)
    return Port(
        number,
        state[0],
        state[1],
        phys_code,
        phys_name,
        rate,
        layer,
        counters,
        hw,
    )


def read_nic(sys_path: str, name: str, problems: list[ReadProblem]) -> Nic | None:
    """One ``class/infiniband/<name>``; None when it went away while it was read."""
    base = os.path.join(sys_path, "class", "infiniband", name)
    ports_dir = os.path.join(base, "ports")
    numbers = listdir(ports_dir)
    if numbers is None:
        if os.path.exists(base):  # there, but its ports cannot be listed
            problems.append(ReadProblem(ports_dir, UNREADABLE, "cannot list the ports"))
        else:  # listed a moment ago, gone now (unbound, unplugged): not there
            problems.append(ReadProblem(base, VANISHED, "gone between the listing and the read"))
        return None
    pci_path = resolve(os.path.join(base, "device"))
    address = os.path.basename(pci_path)
    pci_bus_id = address.lower() if _BDF.match(address) else ""
    guid_path = os.path.join(base, "node_guid")
    guid = _parsed(guid_path, _optional(guid_path, problems), parse_guid, problems)
    firmware = _optional(os.path.join(base, "fw_ver"), problems) or ""
    numa: int | None = None
    if pci_path:
        numa_path = os.path.join(pci_path, "numa_node")
        numa = _parsed(numa_path, _optional(numa_path, problems), parse_numa_node, problems)
    ports = []
    for entry in numbers:
        if not entry.isdigit():
            continue
        port = read_port(os.path.join(ports_dir, entry), int(entry), problems)
        if port is not None:
            ports.append(port)
    return Nic(
        name,
        pci_bus_id,
        pci_path if pci_bus_id else "",
        guid or "",
        firmware,
        numa,
        tuple(sorted(ports, key=lambda p: p.number)),
    )


def read_nics(sys_path: str) -> NicScan:
    """Every NIC under ``<sys_path>/class/infiniband``.

    A host without the directory (no RDMA driver loaded) has no NICs: an empty scan,
    no problem. A NIC that vanishes while it is read is left out (the source tells a
    NIC gone from one seen before); each file that vanished, failed or held garbage is
    a problem and costs only its own value.
    """
    scan = NicScan()
    names = listdir(os.path.join(sys_path, "class", "infiniband"))
    for name in names or ():
        nic = read_nic(sys_path, name, scan.problems)
        if nic is not None:
            scan.nics.append(nic)
    return scan
