"""Whole fake nodes of each vendor, ready for a daemon: its config, environment and size.

Shared by the series-budget tests and the benchmarks that count or serve what a
node exposes (bench/series.py, bench/fleet.py), so the figures and the tests
describe the same nodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.native import built_once

# Every backend off unless a node turns it on (auto sources would only add
# "unavailable" rows that differ from one build machine to the next).
OFF = {
    name: {"enabled": False}
    for name in ("nvml", "amdsmi", "levelzero", "hlml", "tpu", "neuron", "ccl_ras", "ccl_inspector")
}
OFF["cuda_checkpoint"] = {"enabled": False}


@dataclass
class Node:
    """A fake node: the daemon config that reads it, its environment, what it holds."""

    name: str
    vendor: str
    devices: int
    config: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The node's device source."""
        return next(
            k for k, v in self.config["sources"].items() if k != "host" and v.get("enabled", True)
        )

    def with_profile(self, profile: str, **extra: Any) -> dict[str, Any]:
        """The node's config with ``outputs.prometheus.profile`` (and include/exclude)."""
        return {**self.config, "outputs": {"prometheus": {"profile": profile, **extra}}}


def _sources(**on: dict[str, Any]) -> dict[str, Any]:
    fast = {"interval": "1s", "slow_interval": "1s"}
    return {
        "sources": {**OFF, "host": {"interval": "1s"}, **{k: {**fast, **v} for k, v in on.items()}}
    }


NODES = ("nvidia", "nvidia16", "amd", "amd_cpx", "intel", "gaudi", "tpu", "neuron")


@contextlib.contextmanager
def node(kind: str, work: Path) -> Iterator[Node]:
    """A running fake node of ``kind`` (one of :data:`NODES`) under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    if kind in ("nvidia", "nvidia16"):
        from tests.fakes.nvml.control import FakeNvml, build

        devices = 16 if kind == "nvidia16" else 8
        lib = built_once("nvml", build, work / "nvml-lib")
        nv = FakeNvml.create(lib, work / "nvml-state", devices)
        try:
            yield Node(kind, "nvidia", devices, _sources(nvml={}), nv.env())
        finally:
            nv.close()
    elif kind in ("amd", "amd_cpx"):
        from tests.fakes.amdsmi import build as amd_build
        from tests.fakes.amdsmi import state as amd_state

        root = built_once("amdsmi", amd_build.build, work / "amdsmi")
        with amd_state.opened(work / "amdsmi-state.bin", devices=8) as fake:
            if kind == "amd_cpx":
                amd_state.cpx(fake, gpus=8)
            env = {**amd_build.env_for(root, {}), **fake.env}
            config = _sources(amdsmi={"bootstrap_timeout": "30s", "timeout": "5s"})
            yield Node(kind, "amd", 64 if kind == "amd_cpx" else 8, config, env)
    elif kind == "intel":
        from tests.fakes.levelzero import control as ze

        lib = built_once("levelzero", ze.build, work / "ze")
        fake = ze.FakeZe.create(work / "ze-state.bin", 8)
        yield Node(kind, "intel", 8, _sources(levelzero={"library_path": str(lib)}), fake.env)
    elif kind == "gaudi":
        from tests.fakes.hlml import control as hl

        lib = built_once("hlml", hl.build, work / "hlml")
        fake = hl.FakeHlml.create(work / "hlml-state.bin", 8)
        yield Node(kind, "intel_gaudi", 8, _sources(hlml={"library_path": str(lib)}), fake.env)
    elif kind == "tpu":
        from tests.fakes.tpu import control as tpu

        host = tpu.make_host(work / "tpu-host", 8)
        service = tpu.FakeService(work / "svc", {"devices": tpu.devices(8)}).start()
        try:
            config = _sources(tpu={"host_root": str(host), "addresses": [service.address]})
            yield Node(kind, "google", 8, config)
        finally:
            service.stop()
    elif kind == "neuron":
        from tests.fakes.neuron import control as neuron

        host = neuron.make_host(work / "neuron-host", 16)
        monitor = neuron.FakeMonitor(work / "neuron.json")
        monitor.set(
            devices=16,
            cores_per_device=2,
            runtimes=[
                {"tag": f"worker-{r}", "util": {str(2 * r): 40.0}, "status": {"completed": 2}}
                for r in range(16)
            ],
        )
        config = _sources(neuron={"host_root": str(host), "command": monitor.command})
        config["sources"]["neuron"].pop("slow_interval")
        yield Node(kind, "aws", 16, config)
    else:
        raise ValueError(f"unknown node {kind!r}; one of {', '.join(NODES)}")
