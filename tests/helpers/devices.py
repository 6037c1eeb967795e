"""Device readings as a device source would report them, for attribution tests."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.catalog import CATALOG
from exporter.catalog.device import INFO_LABELS
from exporter.config.root import Config
from exporter.config.source import SourceConfig
from exporter.model import OK, Reading, Snapshot
from exporter.sources.base import Source


def info(device: str, uuid: str, pci: str = "", vendor: str = "nvidia") -> Reading:
    values = dict.fromkeys(INFO_LABELS, "")
    values.update(vendor=vendor, device=device, uuid=uuid, pci_bus_id=pci)
    return Reading("accel_device_info", tuple(values[k] for k in INFO_LABELS), 1.0)


def process(device: str, uuid: str, pid: int, used: float = 1e9) -> Reading:
    return Reading("accel_process_memory_bytes", (device, uuid, str(pid)), used)


def readings(spec: dict[str, Any]) -> list[Reading]:
    """``{"devices": [[device, uuid, pci(, vendor)], ...], "processes": [[device, uuid, pid(,
    bytes)], ...], "process_utilization": [[device, uuid, pid, ratio], ...],
    "utilization": [[device, uuid, ratio], ...], "migs": [[device, uuid, gpu_instance,
    compute_instance, mig_uuid(, profile)], ...]}``; labels a row leaves out are empty."""
    out = [info(*d) for d in spec.get("devices", [])]
    mig_labels = len(CATALOG["accel_mig_device_info"].labels)
    out += [
        Reading("accel_mig_device_info", (*m, *[""] * (mig_labels - len(m))), 1.0)
        for m in spec.get("migs", [])
    ]
    # A process row may carry its memory in bytes as a fourth element.
    out += [process(d, u, int(p), *rest) for d, u, p, *rest in spec.get("processes", [])]
    out += [
        Reading("accel_process_sm_utilization_ratio", (d, u, str(p)), float(v))
        for d, u, p, v in spec.get("process_utilization", [])
    ]
    out += [
        Reading("accel_utilization_ratio", (d, u), float(v))
        for d, u, v in spec.get("utilization", [])
    ]
    return out


def snapshot(name: str, items: Sequence[Reading]) -> Snapshot:
    now = time.time()
    return Snapshot(name, tuple(items), OK, now, now, time.monotonic(), 0.001, 3600.0)


class FileDevices(Source):
    """Reports the devices and processes in a JSON file (re-read every poll)."""

    def __init__(self, name: str, config: SourceConfig, path: str) -> None:
        super().__init__(name, config)
        self.path = path

    async def poll(self) -> Sequence[Reading]:
        return readings(json.loads(Path(self.path).read_text()))


def build(config: Config) -> list[Source]:
    """``--extra-sources tests.helpers.devices:build`` (file in ACCEL_TEST_DEVICES)."""
    cfg = SourceConfig(enabled=True, interval=0.3, timeout=1.0, stale_after=5.0)
    return [FileDevices("testdevices", cfg, os.environ["ACCEL_TEST_DEVICES"])]
