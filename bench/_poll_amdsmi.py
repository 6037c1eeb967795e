"""amdsmi backend figures: CPU per poll through the backend vs the same amdsmi calls made bare.

Contract shared with ``bench/_poll_nvml.py`` (driven by ``bench/poll.py``)::

    def run(devices: int, polls: int, workdir: pathlib.Path) -> dict[str, Any]

Runnable alone too: ``.venv/bin/python bench/_poll_amdsmi.py [--devices 8] [--polls 200]``
prints the JSON. CPU is ``time.process_time`` of this process, with the real
amdsmi package driving the fake libamd_smi.so (built with gcc in ``workdir``)
and the event thread off, so only polling is counted. The bare loop makes the
same amdsmi calls as the backend's fast (or slow) poll; the fake's call
counter checks that the two really make the same calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _common import Subject, measure, reply_parser  # noqa: E402

from exporter.backends.amdsmi import AmdSmiBackend  # noqa: E402
from tests.fakes.amdsmi import build, state  # noqa: E402
from tests.fakes.amdsmi.expected import uuid  # noqa: E402


def _bare_fast(a: Any, handles: list[Any]) -> None:
    temps = ("EDGE", "HOTSPOT", "VRAM", "HBM_0", "HBM_1", "HBM_2", "HBM_3")
    clocks = ("GFX", "MEM", "SOC", "DF", "VCLK0", "DCLK0")
    current = a.AmdSmiTemperatureMetric.CURRENT
    for h in handles:
        a.amdsmi_get_gpu_activity(h)
        for kind in (a.AmdSmiMemoryType.VRAM, a.AmdSmiMemoryType.VIS_VRAM, a.AmdSmiMemoryType.GTT):
            a.amdsmi_get_gpu_memory_total(h, kind)
            a.amdsmi_get_gpu_memory_usage(h, kind)
        for t in temps:
            with contextlib.suppress(a.AmdSmiLibraryException):  # no edge sensor on MI300X
                a.amdsmi_get_temp_metric(h, a.AmdSmiTemperatureType[t], current)
        a.amdsmi_get_power_info(h)
        a.amdsmi_get_energy_count(h)
        for c in clocks:
            a.amdsmi_get_clock_info(h, a.AmdSmiClkType[c])
        with contextlib.suppress(a.AmdSmiLibraryException):  # fanless
            a.amdsmi_get_gpu_fan_speed(h, 0)
        a.amdsmi_get_pcie_info(h)
        a.amdsmi_get_gpu_metrics_info(h)
        a.amdsmi_get_violation_status(h)


def _bare_slow(a: Any, handles: list[Any]) -> None:
    _bare_fast(a, handles)
    blocks = [b for b in a.AmdSmiGpuBlock if b.name not in ("INVALID", "RESERVED")]
    for h in handles:
        a.amdsmi_get_gpu_total_ecc_count(h)
        enabled = a.amdsmi_get_gpu_ecc_enabled(h)
        for b in blocks:
            if enabled & int(b):
                a.amdsmi_get_gpu_ecc_count(h, b)
        a.amdsmi_get_gpu_kfd_info(h)


def prepare(devices: int, workdir: Path) -> Subject:
    """The amdsmi backend with ``devices`` fake MI300X GPUs, ready to measure."""
    root = build.build(workdir / "amdsmi")
    fake = state.create(workdir / "amdsmi-state.bin", devices)
    # amdsmi finds its library while it is imported: the environment comes first.
    os.environ.update(build.env_for(root, {}))
    os.environ.update(fake.env)
    backend = AmdSmiBackend({"events": False})
    parse = reply_parser(backend.bootstrap())
    api = backend.api
    handles = [g.handle for g in backend.gpus]

    def poll(slow: bool) -> Any:
        return backend.handle("poll", {"slow": slow, "processes": False, "events": False})

    return Subject(
        calls=lambda: int(fake.state.calls),
        parse=parse,
        polls={
            "fast": (lambda: poll(False), lambda: _bare_fast(api, handles)),
            "slow": (lambda: poll(True), lambda: _bare_slow(api, handles)),
        },
        close=backend.close,
        config={"sources": {"host": {"enabled": False}, "amdsmi": {}}},
        env={**build.env_for(root, {}), **fake.env},
        ids=[(str(i), uuid(fake.device(i))) for i in range(devices)],
    )


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the amdsmi backend with ``devices`` fake MI300X GPUs."""
    return measure(prepare(devices, workdir), devices, polls, workdir)


def main(argv: list[str] | None = None) -> int:
    """Run standalone and print the JSON."""
    parser = argparse.ArgumentParser(description="amdsmi backend poll cost")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-amdsmi-") as tmp:
        report = run(args.devices, args.polls, Path(tmp))
    json.dump({"amdsmi": report}, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
