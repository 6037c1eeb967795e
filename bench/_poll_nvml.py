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
from pathlib import Path
from typing import Any

from _common import Subject, measure, reply_parser

from exporter.backends import nvml_support as nv
from exporter.backends.nvml import NvmlBackend
from tests.fakes.nvml.control import FakeNvml, build


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


def prepare(devices: int, workdir: Path) -> Subject:
    """The nvml backend with ``devices`` fake GPUs, ready to measure."""
    lib = build(workdir / "lib")
    fake = FakeNvml.create(lib, workdir / "state", devices)
    os.environ["FAKE_NVML_STATE"] = str(fake.path)
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)  # pynvml's dlopen finds it by SONAME
    backend = NvmlBackend({"events": False})
    parse = reply_parser(backend.bootstrap())
    n = backend.nvml
    handles = [g.handle for g in backend.gpus]
    links = int(fake.device(0).nvlink_count)
    backend.poll(slow=True, processes=False, events=False)  # learn the NVLink layout
    return Subject(
        calls=lambda: int(fake.state.calls),
        parse=parse,
        polls={
            "fast": (
                lambda: backend.poll(slow=False, processes=False, events=False),
                lambda: _bare_fast(n, handles, links),
            ),
            "slow": (
                lambda: backend.poll(slow=True, processes=False, events=False),
                lambda: _bare_slow(n, handles, links),
            ),
        },
        close=backend.close,
        config={"sources": {"host": {"enabled": False}, "nvml": {}}},
        env=fake.env(),
        ids=[(str(i), fake.uuid(i)) for i in range(devices)],
    )


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the nvml backend with ``devices`` fake GPUs."""
    return measure(prepare(devices, workdir), devices, polls, workdir)
