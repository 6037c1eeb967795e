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
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from exporter.backends.amdsmi import AmdSmiBackend  # noqa: E402
from tests.fakes.amdsmi import build, state  # noqa: E402
from tests.fakes.amdsmi.expected import uuid  # noqa: E402
from tests.helpers.daemon import Daemon, samples, value  # noqa: E402


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


def _cpu(through: Callable[[], Any], bare: Callable[[], Any], polls: int) -> tuple[float, float]:
    """CPU seconds per call of each, measured in alternating rounds.

    Alternating keeps both sides under the same conditions (other load on the
    machine, CPU frequency, heap growth), so their ratio is not biased by order.
    """
    through()
    bare()
    rounds = max(1, min(polls, 10))
    per_round = max(1, polls // rounds)
    spent = [0.0, 0.0]
    for _ in range(rounds):
        for side, fn in enumerate((through, bare)):
            started = time.process_time()
            for _ in range(per_round):
                fn()
            spent[side] += time.process_time() - started
    n = rounds * per_round
    return spent[0] / n, spent[1] / n


def _calls(fake: state.FakeAmdSmi, fn: Callable[[], Any]) -> int:
    before = int(fake.state.calls)
    fn()
    return int(fake.state.calls) - before


def _first_complete_metrics(
    fake: state.FakeAmdSmi, root: Path, devices: int, workdir: Path
) -> float:
    config = {"sources": {"host": {"enabled": False}, "amdsmi": {}}}
    env = {**build.env_for(root, {}), **fake.env}
    daemon = Daemon(workdir, config, env=env)
    started = time.monotonic()
    daemon.start()
    try:
        while True:
            with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
                parsed = samples(resp.read().decode())
            up = [
                value(parsed, "accel_device_up", device=str(i), uuid=uuid(fake.device(i)))
                for i in range(devices)
            ]
            if all(v == 1 for v in up):
                return time.monotonic() - started
            if time.monotonic() - started > 60:
                raise RuntimeError("the daemon did not serve complete metrics within 60 s")
            time.sleep(0.01)
    finally:
        daemon.stop()


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the amdsmi backend with ``devices`` fake MI300X GPUs."""
    root = build.build(workdir / "amdsmi")
    fake = state.create(workdir / "amdsmi-state.bin", devices)
    # amdsmi finds its library while it is imported: the environment comes first.
    os.environ.update(build.env_for(root, {}))
    os.environ.update(fake.env)
    backend = AmdSmiBackend({"events": False})
    backend.bootstrap()
    api = backend.api
    handles = [g.handle for g in backend.gpus]

    def fast() -> Any:
        return backend.handle("poll", {"slow": False, "processes": False, "events": False})

    def slow() -> Any:
        return backend.handle("poll", {"slow": True, "processes": False, "events": False})

    result: dict[str, Any] = {"devices": devices, "polls": polls}
    for name, through, bare in (
        ("fast", fast, lambda: _bare_fast(api, handles)),
        ("slow", slow, lambda: _bare_slow(api, handles)),
    ):
        calls, bare_calls = _calls(fake, through), _calls(fake, bare)
        if calls != bare_calls:
            raise RuntimeError(f"{name}: backend made {calls} amdsmi calls, bare loop {bare_calls}")
        cpu, bare_cpu = _cpu(through, bare, polls)
        reply = through()
        result[name] = {
            "amdsmi_calls_per_poll": calls,
            "cpu_seconds_per_poll": cpu,
            "bare_cpu_seconds_per_poll": bare_cpu,
            "ratio": cpu / bare_cpu,
            "series_per_poll": len(reply["readings"]) + len(reply.get("slow_readings", [])),
        }
    backend.close()
    starts = [_first_complete_metrics(fake, root, devices, workdir) for _ in range(3)]
    result["first_complete_metrics_seconds"] = statistics.median(starts)
    result["first_complete_metrics_runs"] = starts
    result["targets"] = {"fast_ratio_max": 1.5, "first_complete_metrics_seconds_max": 2.0}
    return result


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
