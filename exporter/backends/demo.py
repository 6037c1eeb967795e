"""Simulated GPUs for ``accel-exporter --demo``, run in a worker like every device backend.

No library, no hardware, no compiler: the values are computed from the clock, so a
laptop shows what a node would (docs/demo.md). The GPUs look like an 8-GPU H100 node
and go through everything a real one does: the worker, the wire shape, the daemon's
checks of the reply, the catalog, the health judge, every output. Every device is
marked as simulated where a dashboard shows it: ``vendor="demo"`` and a model naming
the demo on ``accel_device_info``, and a uuid that starts with ``DEMO-`` on every
device series.

The values move: each GPU follows its own slow load curve (utilization, power,
temperature, clocks, memory, PCIe and NVLink traffic follow it), energy is the
integral of power, ECC and XID counts stay 0. One GPU (:data:`DEGRADED`) has a
row remapping pending: the health verdict says ``degraded`` (``row_remap_pending``)
and the shipped AccelRowRemapPending and AccelDeviceHealthDegraded alerts fire.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.backend_api.wire import Rows
from exporter.backends import nvml_support as nv
from exporter.backends.base import BackendError
from exporter.backends.contract import Emitter, poll_devices
from exporter.backends.nvml_reliability import FABRIC_HEALTH_BITS, RECOVERY_ACTIONS
from exporter.catalog.vocabulary import FABRIC_STATES, NVLINK_ERRORS
from exporter.family_names import (
    ACCEL_CLOCK_HERTZ,
    ACCEL_CLOCK_MAX_HERTZ,
    ACCEL_CLOCK_THROTTLE_ACTIVE,
    ACCEL_CLOCK_VIOLATION_SECONDS_TOTAL,
    ACCEL_DECODER_UTILIZATION_RATIO,
    ACCEL_DEVICE_EVENTS_TOTAL,
    ACCEL_DEVICE_RECOVERY_ACTION,
    ACCEL_DRAM_ACTIVE_RATIO,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_ENCODER_UTILIZATION_RATIO,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_FAN_SPEED_RATIO,
    ACCEL_GRAPHICS_ENGINE_ACTIVE_RATIO,
    ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_RESERVED_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE,
    ACCEL_NVIDIA_FABRIC_STATE,
    ACCEL_NVLINK_ERRORS_TOTAL,
    ACCEL_NVLINK_RX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_NVLINK_RX_BYTES_TOTAL,
    ACCEL_NVLINK_TX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_NVLINK_TX_BYTES_TOTAL,
    ACCEL_NVLINK_UP,
    ACCEL_PCIE_LINK_GENERATION,
    ACCEL_PCIE_LINK_MAX_GENERATION,
    ACCEL_PCIE_LINK_MAX_WIDTH,
    ACCEL_PCIE_LINK_WIDTH,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_PCIE_RX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PCIE_RX_BYTES_PER_SECOND,
    ACCEL_PCIE_TX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PCIE_TX_BYTES_PER_SECOND,
    ACCEL_PERFORMANCE_STATE,
    ACCEL_PIPE_ACTIVE_RATIO,
    ACCEL_POWER_LIMIT_BOUND_WATTS,
    ACCEL_POWER_LIMIT_WATTS,
    ACCEL_POWER_WATTS,
    ACCEL_PROCESS_DECODER_UTILIZATION_RATIO,
    ACCEL_PROCESS_ENCODER_UTILIZATION_RATIO,
    ACCEL_PROCESS_INFO,
    ACCEL_PROCESS_MEMORY_BYTES,
    ACCEL_PROCESS_MEMORY_UTILIZATION_RATIO,
    ACCEL_PROCESS_SM_UTILIZATION_RATIO,
    ACCEL_PROCESSES,
    ACCEL_REMAPPED_ROWS,
    ACCEL_REMAPPED_ROWS_FAILURE,
    ACCEL_REMAPPED_ROWS_PENDING,
    ACCEL_RETIRED_PAGES,
    ACCEL_RETIRED_PAGES_PENDING,
    ACCEL_SM_ACTIVE_RATIO,
    ACCEL_SM_OCCUPANCY_RATIO,
    ACCEL_SRAM_ECC_THRESHOLD_EXCEEDED,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_TEMPERATURE_MARGIN_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
)

SOURCE = "demo"
VENDOR = "demo"
MODEL = "Simulated H100 80GB HBM3 (accel-exporter --demo)"
DEVICES = 8
# The position of the GPU with a pending row remapping (degraded).
DEGRADED = 1
LINKS = 18  # NVLink 4 links of an H100 SXM
PERIOD = 300.0  # seconds of one load cycle
GIB = 1024**3
MEMORY = 80 * GIB
RESERVED = GIB // 2
POWER_LIMIT = 700.0
IDLE_POWER = 90.0
CLOCK_MAX = {"graphics": 1.98e9, "sm": 1.98e9, "memory": 2.619e9, "video": 1.755e9}
PIPES = ("tensor", "fp64", "fp32", "fp16")


def uuid(position: int) -> str:
    """The uuid of simulated GPU ``position``: ``DEMO-`` says so on every device series."""
    return f"DEMO-GPU-{position:04d}"


@dataclass
class _Gpu:
    """One simulated GPU (exporter.backends.contract.Polled)."""

    index: int
    device: str
    uuid: str
    down: str = ""
    errors: dict[str, int] = field(default_factory=dict)
    energy: float = 0.0  # joules since the worker started
    throttled: float = 0.0  # seconds at the power cap since the worker started


class DemoBackend:
    """The ``demo`` device backend (see the module docstring)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.count = int(config.get("devices", DEVICES))
        self.gpus: list[_Gpu] = []
        self.started = time.time()
        self.last = self.started
        self.pid = os.getpid()
        self._log = log.get(source=SOURCE)

    def bootstrap(self) -> dict[str, Any]:
        """The inventory: ``devices`` simulated GPUs."""
        if self.count < 1:
            raise BackendError("no_devices", "the demo needs at least one GPU")
        self.gpus = [_Gpu(i, str(i), uuid(i)) for i in range(self.count)]
        info = {"model": MODEL, "driver_version": "demo", "cuda_driver_version": "demo"}
        return {
            "vendor": VENDOR,
            "devices": [
                {
                    "device": g.device,
                    "uuid": g.uuid,
                    "info": {**info, "serial": f"DEMO{g.index:08d}"},
                }
                for g in self.gpus
            ],
        }

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``; anything else is an error."""
        if op != "poll":
            raise BackendError("unknown_op", f"the demo backend has no operation {op!r}")
        now = time.time()
        elapsed, self.last = max(0.0, now - self.last), now
        processes = bool(args.get("processes"))

        def read(gpu: _Gpu, position: int, rows: Rows, slow_rows: Rows | None) -> None:
            load = self.load(position, now)
            self._fast(gpu, Emitter(position, rows), load, elapsed, processes)
            if slow_rows is not None:
                self._slow(Emitter(position, slow_rows))

        return poll_devices(self.gpus, bool(args.get("slow")), read, self._log, SOURCE)

    def load(self, position: int, now: float) -> float:
        """How busy GPU ``position`` is at ``now``, 0..1: a slow wave of its own."""
        phase = 2 * math.pi * ((now - self.started) / PERIOD + position / max(1, self.count))
        # Mostly busy, now and then at the power cap (above 0.9), now and then nearly idle.
        return min(0.99, max(0.02, 0.52 + 0.45 * math.sin(phase) + 0.04 * math.sin(7 * phase)))

    def _fast(self, gpu: _Gpu, out: Emitter, load: float, elapsed: float, processes: bool) -> None:
        power = IDLE_POWER + (POWER_LIMIT - IDLE_POWER) * load
        gpu.energy += power * elapsed
        capped = load > 0.9
        if capped:
            gpu.throttled += elapsed
        temperature = 32 + 45 * load + gpu.index % 3
        used = 4 * GIB + (MEMORY - 12 * GIB) * load
        out.add(ACCEL_UTILIZATION_RATIO, load)
        out.add(ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO, 0.7 * load)
        out.add(ACCEL_ENCODER_UTILIZATION_RATIO, 0.0)
        out.add(ACCEL_DECODER_UTILIZATION_RATIO, 0.0)
        out.add(ACCEL_MEMORY_TOTAL_BYTES, float(MEMORY))
        out.add(ACCEL_MEMORY_RESERVED_BYTES, float(RESERVED))
        out.add(ACCEL_MEMORY_USED_BYTES, used)
        out.add(ACCEL_MEMORY_FREE_BYTES, MEMORY - RESERVED - used)
        out.add(ACCEL_TEMPERATURE_CELSIUS, temperature, "gpu")
        out.add(ACCEL_TEMPERATURE_CELSIUS, temperature + 9, "memory")
        out.add(ACCEL_TEMPERATURE_MARGIN_CELSIUS, 87 - temperature)
        out.add(ACCEL_POWER_WATTS, power)
        out.add(ACCEL_POWER_LIMIT_WATTS, POWER_LIMIT)
        out.add(ACCEL_ENERGY_JOULES_TOTAL, gpu.energy)
        out.add(ACCEL_FAN_SPEED_RATIO, 0.3 + 0.5 * load, "0")
        out.add(ACCEL_PERFORMANCE_STATE, 0.0)
        for clock, top in CLOCK_MAX.items():
            scale = 1.0 if clock == "memory" else 0.6 + 0.4 * load
            out.add(ACCEL_CLOCK_HERTZ, top * scale, clock)
            out.add(ACCEL_CLOCK_MAX_HERTZ, top, clock)
        for _, reason in nv.THROTTLE_REASONS:
            active = reason == "sw_power_cap" and capped
            out.add(ACCEL_CLOCK_THROTTLE_ACTIVE, 1.0 if active else 0.0, reason)
        for _, reason in nv.VIOLATION_FIELDS:
            out.add(
                ACCEL_CLOCK_VIOLATION_SECONDS_TOTAL,
                gpu.throttled if reason == "sw_power_cap" else 0.0,
                reason,
            )
        pcie = 2e9 + 22e9 * load
        out.add(ACCEL_PCIE_TX_BYTES_PER_SECOND, pcie)
        out.add(ACCEL_PCIE_RX_BYTES_PER_SECOND, 1.2 * pcie)
        out.add(ACCEL_PCIE_TX_AVERAGE_BYTES_PER_SECOND, pcie)
        out.add(ACCEL_PCIE_RX_AVERAGE_BYTES_PER_SECOND, 1.2 * pcie)
        out.add(ACCEL_PCIE_REPLAYS_TOTAL, 0.0)
        out.add(ACCEL_PCIE_LINK_GENERATION, 5.0)
        out.add(ACCEL_PCIE_LINK_WIDTH, 16.0)
        out.add(ACCEL_GRAPHICS_ENGINE_ACTIVE_RATIO, load)
        out.add(ACCEL_SM_ACTIVE_RATIO, 0.92 * load)
        out.add(ACCEL_SM_OCCUPANCY_RATIO, 0.6 * load)
        out.add(ACCEL_DRAM_ACTIVE_RATIO, 0.7 * load)
        for i, pipe in enumerate(PIPES):
            out.add(ACCEL_PIPE_ACTIVE_RATIO, load / (2 + i), pipe)
        link_rate = 12e9 * load  # bytes/s on each link
        out.add(ACCEL_NVLINK_TX_AVERAGE_BYTES_PER_SECOND, LINKS * link_rate)
        out.add(ACCEL_NVLINK_RX_AVERAGE_BYTES_PER_SECOND, LINKS * link_rate)
        traffic = 12e9 * (gpu.energy / POWER_LIMIT)  # grows with the work done
        for link in range(LINKS):
            out.add(ACCEL_NVLINK_UP, 1.0, str(link))
            out.add(ACCEL_NVLINK_TX_BYTES_TOTAL, traffic, str(link))
            out.add(ACCEL_NVLINK_RX_BYTES_TOTAL, traffic, str(link))
            for kind in NVLINK_ERRORS:
                out.add(ACCEL_NVLINK_ERRORS_TOTAL, 0.0, str(link), kind)
        for _, event in nv.EVENTS:
            out.add(ACCEL_DEVICE_EVENTS_TOTAL, 0.0, event)
        for action in RECOVERY_ACTIONS:
            out.add(ACCEL_DEVICE_RECOVERY_ACTION, 1.0 if action == "none" else 0.0, action)
        if processes:
            self._processes(out, load, used)

    def _processes(self, out: Emitter, load: float, used: float) -> None:
        # One training process a GPU. Its pid is this worker's: a real process of this
        # machine, so workload attribution never lands on an unrelated one.
        pid = str(self.pid)
        out.add(ACCEL_PROCESSES, 1.0)
        out.add(ACCEL_PROCESS_MEMORY_BYTES, used - 2 * GIB, pid)
        out.add(ACCEL_PROCESS_INFO, 1.0, pid, "python3 train.py (demo)")
        out.add(ACCEL_PROCESS_SM_UTILIZATION_RATIO, 0.92 * load, pid)
        out.add(ACCEL_PROCESS_MEMORY_UTILIZATION_RATIO, 0.7 * load, pid)
        out.add(ACCEL_PROCESS_ENCODER_UTILIZATION_RATIO, 0.0, pid)
        out.add(ACCEL_PROCESS_DECODER_UTILIZATION_RATIO, 0.0, pid)

    def _slow(self, out: Emitter) -> None:
        degraded = out.position == DEGRADED
        for _, kind in nv.ECC_TYPES:
            for _, counter in nv.ECC_COUNTERS:
                out.add(ACCEL_ECC_ERRORS_TOTAL, 0.0, kind, counter)
        for _, cause in nv.RETIREMENT_CAUSES:
            out.add(ACCEL_RETIRED_PAGES, 0.0, cause)
        out.add(ACCEL_RETIRED_PAGES_PENDING, 0.0)
        # The degraded GPU: one row remapped for a correctable error, its remap pending
        # until the GPU is reset (exporter.health: row_remap_pending, degraded).
        out.add(ACCEL_REMAPPED_ROWS, 1.0 if degraded else 0.0, "corrected")
        out.add(ACCEL_REMAPPED_ROWS, 0.0, "uncorrected")
        out.add(ACCEL_REMAPPED_ROWS_PENDING, 1.0 if degraded else 0.0)
        out.add(ACCEL_REMAPPED_ROWS_FAILURE, 0.0)
        out.add(ACCEL_SRAM_ECC_THRESHOLD_EXCEEDED, 0.0)
        # An HGX board: the GPUs joined the NVSwitch fabric, which reports no issue.
        for state in FABRIC_STATES:
            out.add(ACCEL_NVIDIA_FABRIC_STATE, 1.0 if state == "completed" else 0.0, state)
        for _, check in FABRIC_HEALTH_BITS:
            out.add(ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE, 0.0, check)
        out.add(ACCEL_PCIE_LINK_MAX_GENERATION, 5.0)
        out.add(ACCEL_PCIE_LINK_MAX_WIDTH, 16.0)
        out.add(ACCEL_POWER_LIMIT_BOUND_WATTS, 200.0, "min")
        out.add(ACCEL_POWER_LIMIT_BOUND_WATTS, POWER_LIMIT, "max")
        out.add(ACCEL_POWER_LIMIT_BOUND_WATTS, POWER_LIMIT, "default")

    def close(self) -> None:
        """Nothing to release."""
