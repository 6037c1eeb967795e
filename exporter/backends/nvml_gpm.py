"""Profiling-grade activity of a whole GPU through NVML GPM (Hopper and later).

GPM gives DCGM's profiling (DCP) figures without DCGM: a metric is the average
between two samples of the GPU's performance counters. Each GPU keeps a ring of
two sample buffers for the worker's life, so a fast poll costs one
``nvmlGpmSampleGet`` (into the buffer not holding the previous poll's sample) and
one ``nvmlGpmMetricsGet`` asking every metric at once, with no allocation: the
previous poll's sample is the first of this one. A metric the GPU answers
NOT_SUPPORTED for is dropped from its request for good, once.

The first poll after a start (or after a failed sample) has no value: it needs
two samples. A sample that fails breaks the pair, so no figure is computed over
a gap it did not see (never a stale number). The buffers are freed when the GPU
is found down and when the worker closes.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from itertools import repeat
from operator import mul, truediv
from typing import Any

from exporter.backends import nvml_support as nv
from exporter.backends.contract import DeviceGone, Emitter
from exporter.backends.nvml_gpu import Gpu
from exporter.family_names import (
    ACCEL_DRAM_ACTIVE_RATIO,
    ACCEL_ENGINE_UTILIZATION_RATIO,
    ACCEL_GRAPHICS_ENGINE_ACTIVE_RATIO,
    ACCEL_MIG_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MIG_UTILIZATION_RATIO,
    ACCEL_NVLINK_RX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_NVLINK_TX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PCIE_RX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PCIE_TX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PIPE_ACTIVE_RATIO,
    ACCEL_SM_ACTIVE_RATIO,
    ACCEL_SM_OCCUPANCY_RATIO,
)

# Per-entry layout of nvmlGpmMetric_t: metricId, nvmlReturn, value (double), then
# metricInfo (three pointers), 40 bytes; the array starts after version,
# numMetrics and the two sample handles.
_METRIC = struct.Struct("=IId24x")
_METRICS_OFFSET = 24
_MIB = 1 << 20

# The reason counted in accel_field_errors_total{source="nvml"} for a value outside its range.
INVALID_VALUE = "invalid_value"

# nvmlGpmMetricId_t -> (family, label value or "", percent: True for a 0..100 %
# figure exported as a 0..1 ratio, False for MiB/s exported as bytes/s).
GPM_METRICS: dict[int, tuple[str, str, bool]] = {
    1: (ACCEL_GRAPHICS_ENGINE_ACTIVE_RATIO, "", True),
    2: (ACCEL_SM_ACTIVE_RATIO, "", True),
    3: (ACCEL_SM_OCCUPANCY_RATIO, "", True),
    4: (ACCEL_PIPE_ACTIVE_RATIO, "integer", True),
    5: (ACCEL_PIPE_ACTIVE_RATIO, "tensor", True),
    6: (ACCEL_PIPE_ACTIVE_RATIO, "tensor_dfma", True),
    7: (ACCEL_PIPE_ACTIVE_RATIO, "tensor_hmma", True),
    8: (ACCEL_PIPE_ACTIVE_RATIO, "tensor_dmma", True),
    9: (ACCEL_PIPE_ACTIVE_RATIO, "tensor_imma", True),
    10: (ACCEL_DRAM_ACTIVE_RATIO, "", True),
    11: (ACCEL_PIPE_ACTIVE_RATIO, "fp64", True),
    12: (ACCEL_PIPE_ACTIVE_RATIO, "fp32", True),
    13: (ACCEL_PIPE_ACTIVE_RATIO, "fp16", True),
    20: (ACCEL_PCIE_TX_AVERAGE_BYTES_PER_SECOND, "", False),
    21: (ACCEL_PCIE_RX_AVERAGE_BYTES_PER_SECOND, "", False),
    **{30 + k: (ACCEL_ENGINE_UTILIZATION_RATIO, f"nvdec{k}", True) for k in range(8)},
    **{40 + k: (ACCEL_ENGINE_UTILIZATION_RATIO, f"nvjpg{k}", True) for k in range(8)},
    **{50 + k: (ACCEL_ENGINE_UTILIZATION_RATIO, f"ofa{k}", True) for k in range(2)},
    60: (ACCEL_NVLINK_RX_AVERAGE_BYTES_PER_SECOND, "", False),
    61: (ACCEL_NVLINK_TX_AVERAGE_BYTES_PER_SECOND, "", False),
    **{166 + k: (ACCEL_ENGINE_UTILIZATION_RATIO, f"nvenc{k}", True) for k in range(4)},
}


@dataclass
class GpmState:
    """What one GPU keeps between polls for GPM: sample buffers and its requests.

    ``requests[k]`` pairs the samples with buffer ``k`` as the later one, so a poll
    sets no field of a request (pynvml's struct setters cost more than the call).
    """

    buffers: list[Any]
    requests: list[Any]
    ids: list[int] = field(default_factory=list)
    # (family, row prefix, percent) of each asked id, in request order: the percent
    # figures first (``ratios`` of them), then the rates.
    targets: list[tuple[str, tuple[Any, ...], bool]] = field(default_factory=list)
    ratios: int = 0
    no_errors: bytes = b""
    # Consecutive ids of one family: (family, first, end, rows template), the template
    # holding the row prefixes with a slot for each value (every ``width``-th item).
    runs: list[tuple[str, int, int, list[Any]]] = field(default_factory=list)
    # Which buffer holds the previous poll's sample; -1: none (the next poll primes).
    previous: int = -1


# Gpu.gpm_full when the GPU does no GPM on the whole device (pre-Hopper, MIG, old binding).
OFF = "off"


class GpmReader:
    """Reads the GPM metrics of whole GPUs (MIG GPU instances: nvml_device)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.available = all(
            nvml.has(name)
            for name in (
                "nvmlGpmQueryDeviceSupport",
                "nvmlGpmSampleGet",
                "c_nvmlGpmMetricsGet_t",
                "NVML_GPM_METRICS_GET_VERSION",
            )
        )

    def read(self, gpu: Gpu, out: Emitter) -> None:
        """Add this GPU's GPM figures since the previous poll (nothing on the first)."""
        state = gpu.gpm_full
        if state is OFF:
            return
        if state is None:
            state = gpu.gpm_full = self._start(gpu, out)
            if state is OFF or state is None:
                return
        assert isinstance(state, GpmState)
        n = self.nvml
        slot = 1 if state.previous == 0 else 0
        try:
            n.nvmlGpmSampleGet(gpu.handle, state.buffers[slot])
        except n.NVMLError as exc:
            self._sample_failed(gpu, state, int(exc.value), str(exc))
            return
        gpu.ok += 1
        first, state.previous = state.previous, slot
        if first < 0 or not state.ids:
            return
        request = state.requests[slot]
        try:
            n.nvmlGpmMetricsGet(request)
        except n.NVMLError as exc:
            self._guard(gpu, state, "nvmlGpmMetricsGet", int(exc.value), str(exc))
            return
        gpu.ok += 1
        self._emit(gpu, state, request, out)

    def _start(self, gpu: Gpu, out: Emitter) -> GpmState | str | None:
        """The GPU's GPM state, OFF when it has none, None to ask again next poll."""
        n = self.nvml
        if not self.available or gpu.mig_mode == "enabled" or gpu.handle is None:
            return OFF
        try:
            support = n.nvmlGpmQueryDeviceSupport(gpu.handle)
        except n.NVMLError as exc:
            code = int(exc.value)
            if code in nv.ABSENT:
                return OFF
            gpu.failure("nvmlGpmQueryDeviceSupport", code, str(exc))
            return None  # counted; asked again at the next poll
        gpu.ok += 1
        if not support.isSupportedDevice:  # before Hopper
            return OFF
        buffers: list[Any] = []
        for _ in range(2):
            sample = gpu.call(n.nvmlGpmSampleAlloc)
            if sample is None:
                for held in buffers:
                    gpu.release_gpm(held)
                return None
            buffers.append(sample)
        requests = []
        for later in range(2):
            request = n.c_nvmlGpmMetricsGet_t()
            request.version = n.NVML_GPM_METRICS_GET_VERSION
            request.sample1, request.sample2 = buffers[1 - later], buffers[later]
            requests.append(request)
        state = GpmState(buffers, requests)
        self._plan(state, list(GPM_METRICS), out)
        return state

    @staticmethod
    def _plan(state: GpmState, ids: list[int], out: Emitter) -> None:
        """Ask ``ids`` from now on (the request's metric ids and where answers go)."""
        # Percent figures first, each family's ids together.
        ids = sorted(ids, key=lambda m: (not GPM_METRICS[m][2], GPM_METRICS[m][0]))
        state.ids = ids
        state.targets = []
        state.ratios = sum(1 for m in ids if GPM_METRICS[m][2])
        state.no_errors = bytes(4 * len(ids))
        state.runs = []
        for i, metric in enumerate(ids):
            for request in state.requests:
                request.metrics[i].metricId = metric
            family, label, percent = GPM_METRICS[metric]
            state.targets.append((family, out.prefix(label) if label else out.prefix(), percent))
        for request in state.requests:
            request.numMetrics = len(ids)
        first = 0
        for i, (family, _prefix, _percent) in enumerate(state.targets):
            if i + 1 == len(ids) or state.targets[i + 1][0] != family:
                template = [x for _f, p, _ in state.targets[first : i + 1] for x in (*p, 0.0)]
                state.runs.append((family, first, i + 1, template))
                first = i + 1

    def _emit(self, gpu: Gpu, state: GpmState, request: Any, out: Emitter) -> None:
        raw = ctypes.string_at(
            ctypes.addressof(request) + _METRICS_OFFSET, _METRIC.size * len(state.ids)
        )
        rows = out.rows
        # The common case, every entry answered and in range, checked and converted
        # by C loops over columns rather than entry by entry.
        view = memoryview(raw)
        values = view.cast("d")[1 :: _METRIC.size // 8].tolist()
        ratios, rates = values[: state.ratios], values[state.ratios :]
        if (
            view.cast("I")[1 :: _METRIC.size // 4].tobytes() == state.no_errors
            and (not ratios or (min(ratios) >= 0 and max(ratios) <= 100))
            and (not rates or min(rates) >= 0)
            and sum(values) - sum(values) == 0  # no NaN, no infinity
        ):
            converted = [*map(truediv, ratios, repeat(100)), *map(mul, rates, repeat(_MIB))]
            for family, first, end, template in state.runs:
                width = len(template) // (end - first)
                template[width - 1 :: width] = converted[first:end]
                rows[family] += template
            return
        dropped: list[int] = []
        for (metric, code, value), (family, prefix, percent) in zip(
            _METRIC.iter_unpack(raw), state.targets, strict=True
        ):
            if code:
                if code == nv.NOT_SUPPORTED:  # this GPU lacks the metric: not asked again
                    dropped.append(metric)
                elif code not in nv.ABSENT:  # absent this time (no data...): omitted only
                    gpu.status(f"nvmlGpmMetricsGet {metric}", code)
                continue
            if percent:
                if not 0 <= value <= 100:  # NaN fails this too
                    gpu.errors[INVALID_VALUE] = gpu.errors.get(INVALID_VALUE, 0) + 1
                    continue
                value /= 100
            elif not 0 <= value < float("inf"):
                gpu.errors[INVALID_VALUE] = gpu.errors.get(INVALID_VALUE, 0) + 1
                continue
            else:
                value *= _MIB
            target = rows[family]
            target += prefix
            target.append(value)
        if dropped:
            self._plan(state, [m for m in state.ids if m not in dropped], out)

    def _sample_failed(self, gpu: Gpu, state: GpmState, code: int, detail: str) -> None:
        # The pair is broken: the next sample starts a new one (no figure over a gap).
        state.previous = -1
        if code in nv.ABSENT:  # the GPU stopped offering GPM (e.g. MIG turned on)
            free(gpu)
            gpu.gpm_full = OFF
            return
        self._guard(gpu, state, "nvmlGpmSampleGet", code, detail)

    @staticmethod
    def _guard(gpu: Gpu, state: GpmState, name: str, code: int, detail: str) -> None:
        """Count a failed call; a fatal one frees the buffers before DeviceGone leaves."""
        if code in nv.DEVICE_FATAL:
            free(gpu)
        gpu.failure(name, code, detail)


def mig_instance(n: Any, gpu: Gpu, gi: int, out: Emitter) -> None:
    """Utilization of one GPU instance (MIG) between this poll and the previous one.

    Through pynvml's own GPM calls (``n``), one sample per instance and poll.
    """
    sample = gpu.call(n.nvmlGpmSampleAlloc)
    if sample is None:
        return
    # Every sample is freed on every path, DeviceGone included: held in
    # gpm_samples (freed later), or freed here.
    try:
        taken = gpu.call(n.nvmlGpmMigSampleGet, gpu.handle, gi, sample)
    except DeviceGone:
        gpu.release_gpm(sample)
        raise
    if taken is None:
        gpu.release_gpm(sample)
        return
    previous = gpu.gpm_samples.get(gi)
    gpu.gpm_samples[gi] = sample
    if previous is None:
        return
    try:
        request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1 = previous
        request.sample2 = sample
        request.metrics[0].metricId = nv.GPM_GRAPHICS_UTIL
        request.metrics[1].metricId = nv.GPM_DRAM_BW_UTIL
        result = gpu.call(n.nvmlGpmMetricsGet, request)
    finally:
        gpu.release_gpm(previous)
    if result is None:
        return
    names = (ACCEL_MIG_UTILIZATION_RATIO, ACCEL_MIG_MEMORY_BANDWIDTH_UTILIZATION_RATIO)
    for metric, name in zip(result.metrics[:2], names, strict=False):
        code = int(metric.nvmlReturn)
        if code:
            gpu.status(f"gpm {metric.metricId}", code)
        else:
            out.ratio(name, metric.value, str(gi))


def free(gpu: Gpu) -> None:
    """Free a GPU's GPM buffers (found down, or the worker closing); re-started on return."""
    state = gpu.gpm_full
    if isinstance(state, GpmState):
        for sample in state.buffers:
            gpu.release_gpm(sample)
        state.buffers.clear()
    gpu.gpm_full = None


def free_all(gpu: Gpu) -> None:
    """Release every GPM sample of a GPU (whole GPU and MIG instances) held between polls."""
    for sample in gpu.gpm_samples.values():
        gpu.release_gpm(sample)
    gpu.gpm_samples.clear()
    free(gpu)
