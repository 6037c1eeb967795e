"""Test-side control of the fake TPU host (a sysfs/dev tree) and the fake metric service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]

# PCI device ids of the chips the fake host can hold (vendor 0x1ae0).
V5E = "0x0063"
V4 = "0x005e"
V3 = ("0x0027", "0x004f")
V7X = "0x0076"


def make_host(root: Path, chips: int, device_id: str = V5E, subsystem: str = "0x0000") -> Path:
    """A host root whose sys/bus/pci/devices lists ``chips`` TPUs (and one other device).

    Chips that libtpu serves through VFIO get an iommu group and /dev/vfio/<group>;
    the others /dev/accelN.
    """
    pci = root / "sys" / "bus" / "pci" / "devices"
    groups = root / "sys" / "kernel" / "iommu_groups"
    pci.mkdir(parents=True, exist_ok=True)
    (root / "dev" / "vfio").mkdir(parents=True, exist_ok=True)
    other = pci / "0000:00:01.0"
    other.mkdir(exist_ok=True)
    (other / "vendor").write_text("0x8086\n")
    (other / "device").write_text("0x1234\n")
    for i in range(chips):
        entry = pci / bdf(i)
        entry.mkdir(exist_ok=True)
        (entry / "vendor").write_text("0x1ae0\n")
        (entry / "device").write_text(device_id + "\n")
        (entry / "subsystem_device").write_text(subsystem + "\n")
        if device_id in (V5E, V7X):
            group = groups / str(10 + i)
            group.mkdir(parents=True, exist_ok=True)
            os.symlink(group, entry / "iommu_group")
            (root / "dev" / "vfio" / str(10 + i)).write_text("")
        else:
            (root / "dev" / f"accel{i}").write_text("")
    return root


def bdf(chip: int) -> str:
    """The fake PCI address of chip ``chip``."""
    return f"0000:00:{4 + chip:02x}.0"


def uuid(chip: int) -> str:
    """The uuid the exporter gives chip ``chip`` (its PCI address)."""
    return f"tpu-{bdf(chip)}"


@dataclass
class FakeService:
    """One fake metric service process (one workload), driven by its scenario file."""

    directory: Path
    scenario: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, **changes: Any) -> None:
        """Change the scenario (the service reads it on every request)."""
        self.scenario.update(changes)
        tmp = self.directory / "scenario.json.tmp"
        tmp.write_text(json.dumps(self.scenario))
        tmp.replace(self.directory / "scenario.json")

    def start(self) -> FakeService:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.set()
        port_file = self.directory / "port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fakes.tpu.server",
                str(self.directory / "scenario.json"),
                str(port_file),
            ],
            cwd=REPO,
        )
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fake TPU metric service did not start")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def devices(chips: int, per_chip: int = 1, used: int = 1 << 30) -> dict[str, dict[str, float]]:
    """Distinct, exactly representable values for each runtime device."""
    out = {}
    for d in range(chips * per_chip):
        out[str(d)] = {
            "total": 16 * (1 << 30),
            "usage": used * (d + 1),
            "duty": 10.0 + d * 2.5,
            "bw": 40.0 + d * 5.0,
        }
    return out
