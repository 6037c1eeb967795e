"""PCIe link training, AER counts and the bridge chain of a PCI function, from sysfs.

What the kernel writes under ``<sys>/bus/pci/devices/<address>/``
(Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/pci-sysfs.c, drivers/pci/pcie/aer.c)::

    current_link_speed   "32.0 GT/s PCIe"  (older kernels: "8 GT/s", "Unknown speed")
    max_link_speed       "32.0 GT/s PCIe"
    current_link_width   "16"              (decimal lanes; 0 while the link is down)
    max_link_width       "16"
    numa_node            "0"               (-1: the platform names none)
    aer_dev_correctable  one "<Name> <count>" line per error type, then TOTAL_ERR_COR
    aer_dev_nonfatal     ... TOTAL_ERR_NONFATAL
    aer_dev_fatal        ... TOTAL_ERR_FATAL

The AER files exist only on AER-capable devices of a kernel built with AER support:
absent, they are no problem. The kernel's AER counters count what *this* device saw;
an endpoint's errors may be counted at its link partner (the switch port) instead.

The PCIe switch of a device comes from its resolved sysfs path, which spells the
bridge chain from the host bridge down:
``devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0`` is root
port 15:01.0, the switch's upstream port 16:00.0, its downstream port 17:00.0, and
the device 18:00.0. The switch is named by its upstream port, the first bridge
under the root port; a device right under a root port is behind no switch. Nested
switches count as the topmost one: two devices under it reach each other without
crossing the CPU (what ``nvidia-smi topo`` calls PIX or PXB).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.catalog.vocabulary import AER_SEVERITIES
from exporter.host.sysfs_read import (
    ParseError,
    ReadProblem,
    Unread,
    malformed,
    read_text,
    resolve,
)

# AER file -> (severity label, the line that totals it).
AER_FILES = tuple(
    zip(
        ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal"),
        AER_SEVERITIES,
        ("TOTAL_ERR_COR", "TOTAL_ERR_NONFATAL", "TOTAL_ERR_FATAL"),
        strict=True,
    )
)
# The slowest PCIe rate (Gen1): where a GPU's link rests while it idles. NVIDIA and AMD
# accelerators drop their link to 2.5 GT/s to save power and train it back up under
# load, so a link at 2.5 GT/s says nothing about its training (see downtrained()).
IDLE_SPEED = 2.5e9

_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GT/s(?: PCIe)?$")
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")


def parse_speed(text: str) -> float | None:
    """``"32.0 GT/s PCIe"`` -> 3.2e10 transfers per second; ``"Unknown"`` -> None.

    ParseError for anything else. "Unknown" (and "Unknown speed" of older kernels)
    is the kernel's word for a link it cannot name a speed for: no value, no problem.
    """
    value = text.strip()
    if value.startswith("Unknown"):
        return None
    m = _SPEED.match(value)
    if not m:
        raise ParseError(f"not '<n> GT/s PCIe': {value[:40]!r}")
    whole, _, fraction = m.group(1).partition(".")
    # Exact in integers: "2.5" is 2_500_000_000, never 2.4999...
    return float(int(whole) * 10**9 + (int(fraction.ljust(9, "0")[:9]) if fraction else 0))


def parse_width(text: str) -> int:
    """``"16"`` -> 16 lanes; ParseError when not a decimal number."""
    value = text.strip()
    if not value.isdigit():
        raise ParseError(f"not a link width: {value[:40]!r}")
    return int(value)


def parse_aer(text: str, total: str) -> int:
    """The ``total`` line's count in an ``aer_dev_*`` file; ParseError if it has none."""
    for line in text.splitlines():
        name, _, count = line.strip().partition(" ")
        if name == total:
            count = count.strip()
            if not count.isdigit():
                raise ParseError(f"{total} is not a count: {count[:40]!r}")
            return int(count)
    raise ParseError(f"no {total} line")


def bridges_of(resolved: str) -> tuple[str, ...]:
    """The PCI bridges above a device, host bridge side first, from its resolved sysfs path.

    ``.../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0`` ->
    ``("0000:15:01.0", "0000:16:00.0")``. Empty when the path holds no host bridge
    (not a PCI device) or the device sits on the root bus.
    """
    parts = resolved.split(os.sep)
    for at, part in enumerate(parts):
        if _HOST_BRIDGE.match(part):
            chain = [p.lower() for p in parts[at + 1 :] if _BDF.match(p)]
            return tuple(chain[:-1])
    return ()


def switch_of(bridges: tuple[str, ...]) -> str:
    """The upstream port naming a device's (topmost) PCIe switch; "" under a root port."""
    return bridges[1] if len(bridges) >= 2 else ""


@dataclass(frozen=True)
class PciLink:
    """One PCI function's link as one read found it (None: not read or not reported)."""

    address: str
    speed: float | None = None
    max_speed: float | None = None
    width: int | None = None
    max_width: int | None = None
    aer: Mapping[str, int] = field(default_factory=dict)
    numa_node: int | None = None
    bridges: tuple[str, ...] = ()

    @property
    def pcie_switch(self) -> str:
        """The upstream port of the switch above it ("" when none)."""
        return switch_of(self.bridges)

    def downtrained(self) -> str:
        """What of the link trained below its maximum: "width", "speed", both, or "".

        Fewer lanes than the device has is always downtraining: no power state narrows
        an accelerator's link. A speed below the maximum counts only above the idle rate
        (:data:`IDLE_SPEED`): a GPU at rest parks its link at 2.5 GT/s, and one that
        trained at Gen4 instead of Gen5 sits at 16 GT/s, not at the floor.
        """
        out = []
        if self.width is not None and self.max_width is not None and self.width < self.max_width:
            out.append("width")
        if (
            self.speed is not None
            and self.max_speed is not None
            and IDLE_SPEED < self.speed < self.max_speed
        ):
            out.append("speed")
        return "+".join(out)


def _value(directory: str, name: str, problems: list[ReadProblem]) -> str | None:
    """An attribute the device may lack (absent: None, no problem; failed: a problem)."""
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    try:
        return read_text(path)
    except Unread as exc:
        problems.append(exc.problem)
        return None


def read_link(sys_path: str, address: str, problems: list[ReadProblem]) -> PciLink | None:
    """The link of the PCI function at ``address``; None when it is not on the bus.

    Each attribute that fails costs only itself (its problem noted in ``problems``).
    """
    directory = os.path.join(sys_path, "bus", "pci", "devices", address)
    resolved = resolve(directory)
    if not resolved:
        return None
    values: dict[str, object] = {}
    for name, parse in (
        ("current_link_speed", parse_speed),
        ("max_link_speed", parse_speed),
        ("current_link_width", parse_width),
        ("max_link_width", parse_width),
    ):
        text = _value(resolved, name, problems)
        if text is None:
            continue
        try:
            values[name] = parse(text)
        except ParseError as exc:
            problems.append(malformed(os.path.join(resolved, name), exc).problem)
    aer: dict[str, int] = {}
    for name, severity, total in AER_FILES:
        text = _value(resolved, name, problems)
        if text is None:
            continue
        try:
            aer[severity] = parse_aer(text, total)
        except ParseError as exc:
            problems.append(malformed(os.path.join(resolved, name), exc).problem)
    numa = None
    text = _value(resolved, "numa_node", problems)
    if text is not None:
        try:
            node = int(text)
            numa = node if node >= 0 else None
        except ValueError:
            problems.append(
                malformed(os.path.join(resolved, "numa_node"), ParseError(text[:40])).problem
            )
    return PciLink(
        address.lower(),
        _float(values.get("current_link_speed")),
        _float(values.get("max_link_speed")),
        _int(values.get("current_link_width")),
        _int(values.get("max_link_width")),
        aer,
        numa,
        bridges_of(resolved),
    )


def _float(value: object) -> float | None:
    return value if isinstance(value, float) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None
