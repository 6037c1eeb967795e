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

from exporter.backends.base import unique_uuids

_NAME = re.compile(r"^neuron(\d+)$")


@dataclass(frozen=True)
class NeuronDevice:
    """One device: its index (as neuron-monitor numbers them), identity and core count."""

    index: int
    uuid: str
    model: str
    serial: str
    pci_bus_id: str
    cores: int  # 0 when the driver does not say


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[:128]
    except OSError:
        return ""


def _indices(root: Path) -> dict[int, Path | None]:
    found: dict[int, Path | None] = {}
    base = root / "sys" / "devices" / "virtual" / "neuron_device"
    for parent, into in ((base, True), (root / "dev", False)):
        try:
            names = [p.name for p in parent.iterdir()]
        except OSError:
            continue
        for name in names:
            m = _NAME.match(name)
            if m and len(m.group(1)) < 6:
                index = int(m.group(1))
                if into:
                    found[index] = parent / name
                else:
                    found.setdefault(index, None)
    return found


def _pci(entry: Path) -> str:
    try:
        name = (entry / "device").resolve(strict=True).name
    except (OSError, RuntimeError):
        return ""
    return name if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", name) else ""


def scan(host_root: str) -> list[NeuronDevice]:
    """The host's Neuron devices by index (empty when there are none)."""
    root = Path(host_root or "/")
    raw = []
    for index, entry in sorted(_indices(root).items()):
        if entry is None:
            raw.append((index, "", "", "", 0))
            continue
        serial = _read(entry / "info" / "serial_number")
        arch = entry / "info" / "architecture"
        model = _read(arch / "device_name") or _read(arch / "arch_type")
        cores = _read(entry / "core_count")
        raw.append((index, serial, model, _pci(entry), int(cores) if cores.isdigit() else 0))
    uuids = unique_uuids([(str(r[0]), r[1]) for r in raw], "neuron-")
    return [
        NeuronDevice(index, uuid, model, serial, pci, cores)
        for (index, serial, model, pci, cores), uuid in zip(raw, uuids, strict=True)
    ]
