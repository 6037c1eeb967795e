"""nvml backend figures for bench/poll.py (see its docstring for the contract).

CPU is measured in this process (``time.process_time``: every thread) with the
real pynvml driving the fake libnvidia-ml.so.1, the event thread off so that
only polling is counted. The bare loop makes the same NVML calls as the
backend's fast (or slow) poll, checked with the fake's call counter.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.backends import nvml_support as nv
from exporter.backends.nvml import NvmlBackend
from tests.fakes.nvml.control import FakeNvml, build
from tests.helpers.daemon import Daemon, samples, value


def _bare_fast(n: Any, handles: list[Any], links: int) -> None:
    fields: list[Any] = [nv.FI_MEMORY_TEMP, *(fid for fid, _ in nv.VIOLATION_FIELDS)]
    for link in range(links):
        fields += [(nv.FI_NVLINK_THROUGHPUT_DATA_TX, link), (nv.FI_NVLINK_THROUGHPUT_DATA_RX, link)]
    for h in handles:
        n.nvmlDeviceGetUtilizationRates(h)
        n.nvmlDeviceGetEncoderUtilization(h)
        n.nvmlDeviceGetDecoderUtilization(h)
        n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        n.nvmlDeviceGetTemperatureV(h, 0)
        n.nvmlDeviceGetPowerUsage(h)
        n.nvmlDeviceGetEnforcedPowerLimit(h)
        n.nvmlDeviceGetTotalEnergyConsumption(h)
        for clock in range(4):
            n.nvmlDeviceGetClockInfo(h, clock)
        with contextlib.suppress(n.NVMLError):
            n.nvmlDeviceGetNumFans(h)  # NOT_SUPPORTED on datacenter GPUs
        n.nvmlDeviceGetPerformanceState(h)
        n.nvmlDeviceGetPcieThroughput(h, 0)
        n.nvmlDeviceGetPcieThroughput(h, 1)
        n.nvmlDeviceGetPcieReplayCounter(h)
        n.nvmlDeviceGetCurrPcieLinkGeneration(h)
        n.nvmlDeviceGetCurrPcieLinkWidth(h)
        n.nvmlDeviceGetCurrentClocksEventReasons(h)
        n.nvmlDeviceGetFieldValues(h, fields)
        n.nvmlDeviceGetComputeRunningProcesses_v3(h)
        n.nvmlDeviceGetGraphicsRunningProcesses_v3(h)


def _bare_slow(n: Any, handles: list[Any], links: int) -> None:
    for h in handles:
        for clock in range(4):
            n.nvmlDeviceGetMaxClockInfo(h, clock)
        n.nvmlDeviceGetMaxPcieLinkGeneration(h)
        n.nvmlDeviceGetMaxPcieLinkWidth(h)
        for etype in range(2):
            for counter in range(2):
                n.nvmlDeviceGetTotalEccErrors(h, etype, counter)
        n.nvmlDeviceGetRetiredPages(h, 0)
        n.nvmlDeviceGetRetiredPages(h, 1)
        n.nvmlDeviceGetRetiredPagesPendingStatus(h)
        n.nvmlDeviceGetRemappedRows(h)
        n.nvmlDeviceGetFieldValues(h, [nv.FI_NVLINK_LINK_COUNT])
        for link in range(links):
            n.nvmlDeviceGetNvLinkState(h, link)
        n.nvmlDeviceGetMigMode(h)
    _bare_fast(n, handles, links)


ROUNDS = 7


def _cpu_pair(
    through: Callable[[], Any], bare: Callable[[], Any], polls: int
) -> tuple[float, float]:
    """CPU seconds per call of each, interleaved in rounds; the minimum round of each.

    The machine is shared: interleaving exposes both to the same background load,
    and the minimum is the round least disturbed by it.
    """
    through()  # warm caches (function pointers, imports)
    bare()
    per_round = max(1, polls // ROUNDS)
    best = [float("inf"), float("inf")]
    for _ in range(ROUNDS):
        for i, fn in enumerate((through, bare)):
            started = time.process_time()
            for _ in range(per_round):
                fn()
            best[i] = min(best[i], (time.process_time() - started) / per_round)
    return best[0], best[1]


def _calls(fake: FakeNvml, fn: Callable[[], Any]) -> int:
    before = int(fake.state.calls)
    fn()
    return int(fake.state.calls) - before


def _first_complete_metrics(fake: FakeNvml, devices: int, workdir: Path) -> float:
    config = {"sources": {"host": {"enabled": False}, "nvml": {}}}
    daemon = Daemon(workdir, config, env=fake.env())
    started = time.monotonic()
    daemon.start()
    try:
        while True:
            with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
                parsed = samples(resp.read().decode())
            up = [
                value(parsed, "accel_device_up", device=str(i), uuid=fake.uuid(i))
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
    """Measure the nvml backend with ``devices`` fake GPUs."""
    lib = build(workdir / "lib")
    fake = FakeNvml.create(lib, workdir / "state", devices)
    os.environ["FAKE_NVML_STATE"] = str(fake.path)
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)  # pynvml's dlopen finds it by SONAME
    backend = NvmlBackend({"events": False})
    backend.bootstrap()
    n = backend.nvml
    handles = [g.handle for g in backend.gpus]
    links = int(fake.device(0).nvlink_count)
    backend.poll(slow=True, processes=False, events=False)  # learn the NVLink layout

    def fast() -> Any:
        return backend.poll(slow=False, processes=False, events=False)

    def slow() -> Any:
        return backend.poll(slow=True, processes=False, events=False)

    result: dict[str, Any] = {"devices": devices, "polls": polls}
    for name, through, bare in (
        ("fast", fast, lambda: _bare_fast(n, handles, links)),
        ("slow", slow, lambda: _bare_slow(n, handles, links)),
    ):
        calls, bare_calls = _calls(fake, through), _calls(fake, bare)
        if calls != bare_calls:
            raise RuntimeError(f"{name}: backend made {calls} NVML calls, bare loop {bare_calls}")
        cpu, bare_cpu = _cpu_pair(through, bare, polls)
        result[name] = {
            "nvml_calls_per_poll": calls,
            "cpu_seconds_per_poll": cpu,
            "bare_cpu_seconds_per_poll": bare_cpu,
            "ratio": cpu / bare_cpu,
            "series_per_poll": sum(len(v) for k, v in through().items() if "readings" in k),
        }
    backend.close()
    starts = [_first_complete_metrics(fake, devices, workdir) for _ in range(3)]
    result["first_complete_metrics_seconds"] = statistics.median(starts)
    result["first_complete_metrics_runs"] = starts
    result["targets"] = {"fast_ratio_max": 1.5, "first_complete_metrics_seconds_max": 2.0}
    return result
