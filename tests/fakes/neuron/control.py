"""Test-side control of the fake Neuron host: sysfs tree, scenario file, command line."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("neuron_monitor.py")


def make_host(root: Path, devices: int, cores: int = 2) -> Path:
    """A host root with ``devices`` Neuron devices in sysfs (serial numbers, core counts)."""
    base = root / "sys" / "devices" / "virtual" / "neuron_device"
    for i in range(devices):
        entry = base / f"neuron{i}"
        (entry / "info" / "architecture").mkdir(parents=True, exist_ok=True)
        (entry / "core_count").write_text(f"{cores}\n")
        (entry / "info" / "serial_number").write_text(f"{serial(i)}\n")
        (entry / "info" / "architecture" / "device_name").write_text("Trainium\n")
    (root / "sys" / "module" / "neuron").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "module" / "neuron" / "version").write_text("2.19.64.0\n")
    return root


def serial(i: int) -> str:
    """The fake serial number of device ``i`` (the exporter's uuid for it)."""
    return f"53524{i:05d}"


@dataclass
class FakeMonitor:
    """The scenario of one fake neuron-monitor, and how to run it."""

    path: Path
    scenario: dict[str, Any] = field(default_factory=dict)

    def set(self, **changes: Any) -> None:
        self.scenario.update(changes)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.scenario))
        tmp.replace(self.path)

    def drop(self, *keys: str) -> None:
        for key in keys:
            self.scenario.pop(key, None)
        self.set()

    @property
    def command(self) -> list[str]:
        return [sys.executable, str(SCRIPT), str(self.path)]

    @property
    def pids(self) -> list[int]:
        """The pid of every life so far, in order."""
        path = Path(str(self.path) + ".pids")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    @property
    def printed(self) -> int:
        """Reports printed so far, over all lives."""
        ledger = Path(str(self.path) + ".ledger")
        return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def install(bin_dir: Path, monitor: FakeMonitor) -> Path:
    """An executable named ``neuron-monitor`` in ``bin_dir`` that runs the fake on ``monitor``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "neuron-monitor"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SCRIPT}" "{monitor.path}" "$@"\n')
    program.chmod(0o755)
    return program
