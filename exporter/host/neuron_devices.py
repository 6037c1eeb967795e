"""Neuron devices as the host sees them, from sysfs (or /dev/neuronN without it). Pure reading.

The Neuron driver lists each device as ``sys/devices/virtual/neuron_device/neuronN``
with ``core_count`` and ``info/`` (serial number, architecture). A device
without a workload has no runtime data in neuron-monitor's reports, so the
devices are counted from here. Counter files in that tree are cleared when
written: this module only reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exporter.backend_api.inventory import unique_uuids
from exporter.host.sysfs import link_name, numbered_nodes, read_attr

# At most five digits: a name that is not a device index is not taken for one.
_NAME = re.compile(r"^neuron(\d{1,5})$")


@dataclass(frozen=True)
class NeuronDevice:
    """One device: its index (as neuron-monitor numbers them), identity and core count."""

    index: int
    uuid: str
    model: str
    serial: str
    pci_bus_id: str
    cores: int  # 0 when the driver does not say


def _indices(root: Path) -> dict[int, Path | None]:
    """Device indices: sysfs entries first, /dev/neuronN nodes (no attributes) beside them."""
    found: dict[int, Path | None] = dict(
        numbered_nodes(root / "sys" / "devices" / "virtual" / "neuron_device", _NAME)
    )
    for index in numbered_nodes(root / "dev", _NAME):
        found.setdefault(index, None)
    return found


def indices(host_root: str) -> frozenset[int]:
    """The device indices present now: a directory listing, no attribute read (every poll)."""
    return frozenset(_indices(Path(host_root or "/")))


def _pci(entry: Path) -> str:
    name = link_name(entry / "device")
    return name if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", name) else ""


def scan(host_root: str) -> list[NeuronDevice]:
    """The host's Neuron devices by index (empty when there are none)."""
    root = Path(host_root or "/")
    raw = []
    for index, entry in sorted(_indices(root).items()):
        if entry is None:
            raw.append((index, "", "", "", 0))
            continue
        serial = read_attr(entry / "info" / "serial_number")
        arch = entry / "info" / "architecture"
        model = read_attr(arch / "device_name") or read_attr(arch / "arch_type")
        cores = read_attr(entry / "core_count")
        raw.append((index, serial, model, _pci(entry), int(cores) if cores.isdigit() else 0))
    uuids = unique_uuids([(str(r[0]), r[1]) for r in raw], "neuron-")
    return [
        NeuronDevice(index, uuid, model, serial, pci, cores)
        for (index, serial, model, pci, cores), uuid in zip(raw, uuids, strict=True)
    ]
