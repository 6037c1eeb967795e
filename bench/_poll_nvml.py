"""nvml backend figures for bench/poll.py (see its docstring for the contract).

CPU is measured in this process (``time.process_time``: every thread) with the
real pynvml driving the fake libnvidia-ml.so.1, the event thread off so that
only polling is counted. The bare loop makes the same NVML calls as the
backend's fast (or slow) poll, checked with the fake's call counter.

``gpm`` measures GPM alone: the backend's GPM read of every GPU (one
``nvmlGpmSampleGet`` and one ``nvmlGpmMetricsGet`` a GPU) beside the same two
calls made bare, so ``cpu_seconds_per_poll / devices`` is what GPM adds per GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path
from typing import Any

from _common import Subject, measure, reply_parser

from exporter.backend_api.wire import new_rows
from exporter.backends import nvml_gpm
from exporter.backends import nvml_support as nv
from exporter.backends.contract import Emitter
from exporter.backends.nvml import NvmlBackend
from tests.fakes.nvml.control import FakeNvml, build


class BareGpm:
    """The GPM calls of a fast poll, made bare: two sample buffers a GPU, alternated."""

    def __init__(self, n: Any, handles: list[Any]) -> None:
        self.n = n
        self.gpus = []
        for h in handles:
            request = n.c_nvmlGpmMetricsGet_t()
            request.version = n.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(nvml_gpm.GPM_METRICS)
            for i, metric in enumerate(nvml_gpm.GPM_METRICS):
                request.metrics[i].metricId = metric
            buffers = [n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()]
            n.nvmlGpmSampleGet(h, buffers[1])
            self.gpus.append((h, buffers, request))
        self.turn = 0

    def __call__(self) -> None:
        n, now = self.n, self.turn
        self.turn ^= 1
        for h, buffers, request in self.gpus:
            n.nvmlGpmSampleGet(h, buffers[now])
            request.sample1, request.sample2 = buffers[now ^ 1], buffers[now]
            n.nvmlGpmMetricsGet(request)

    def close(self) -> None:
        for _h, buffers, _request in self.gpus:
            for sample in buffers:
                self.n.nvmlGpmSampleFree(sample)


def _bare_fast(n: Any, handles: list[Any], links: int, gpm: BareGpm) -> None:
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
        n.nvmlDeviceGetMPSComputeRunningProcesses_v3(h)  # MPS clients by their own PIDs
        n.nvmlDeviceGetMarginTemperature(h)
    gpm()


def _bare_slow(n: Any, handles: list[Any], links: int, gpm: BareGpm) -> None:
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
        n.nvmlDeviceGetFieldValues(h, [230])  # recovery action
        for link in range(links):
            for counter in range(4):
                n.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)
        # No fabric info call: the fake's GPUs have no NVSwitch fabric, which the backend
        # learns at its first slow poll and does not ask again.
        n.nvmlDeviceGetSramEccErrorStatus(h, ctypes.byref(n.c_nvmlEccSramErrorStatus_v1_t()))
        n.nvmlDeviceGetPowerManagementLimitConstraints(h)
        n.nvmlDeviceGetPowerManagementDefaultLimit(h)
        n.nvmlDeviceGetMigMode(h)
    _bare_fast(n, handles, links, gpm)


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
    gpm = BareGpm(n, handles)
    reader = nvml_gpm.GpmReader(n)

    def gpm_through() -> dict[str, Any]:
        rows = new_rows()
        for position, gpu in enumerate(backend.gpus):
            reader.read(gpu, Emitter(position, rows, nv.SENTINELS, gpu.prefixes))
        up = [{"uuid": g.uuid, "up": True, "reason": ""} for g in backend.gpus]
        return {"devices": up, "readings": rows}  # a reply of the GPM figures only

    def close() -> None:
        gpm.close()
        backend.close()

    return Subject(
        calls=lambda: int(fake.state.calls),
        parse=parse,
        polls={
            "fast": (
                lambda: backend.poll(slow=False, processes=False, events=False),
                lambda: _bare_fast(n, handles, links, gpm),
            ),
            "slow": (
                lambda: backend.poll(slow=True, processes=False, events=False),
                lambda: _bare_slow(n, handles, links, gpm),
            ),
            "gpm": (gpm_through, gpm),
        },
        close=close,
        config={"sources": {"host": {"enabled": False}, "nvml": {}}},
        env=fake.env(),
        ids=[(str(i), fake.uuid(i)) for i in range(devices)],
    )


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the nvml backend with ``devices`` fake GPUs."""
    return measure(prepare(devices, workdir), devices, polls, workdir)
