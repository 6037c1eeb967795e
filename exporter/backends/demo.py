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
        out.add("accel_utilization_ratio", load)
        out.add("accel_memory_bandwidth_utilization_ratio", 0.7 * load)
        out.add("accel_encoder_utilization_ratio", 0.0)
        out.add("accel_decoder_utilization_ratio", 0.0)
        out.add("accel_memory_total_bytes", float(MEMORY))
        out.add("accel_memory_reserved_bytes", float(RESERVED))
        out.add("accel_memory_used_bytes", used)
        out.add("accel_memory_free_bytes", MEMORY - RESERVED - used)
        out.add("accel_temperature_celsius", temperature, "gpu")
        out.add("accel_temperature_celsius", temperature + 9, "memory")
        out.add("accel_temperature_margin_celsius", 87 - temperature)
        out.add("accel_power_watts", power)
        out.add("accel_power_limit_watts", POWER_LIMIT)
        out.add("accel_energy_joules_total", gpu.energy)
        out.add("accel_fan_speed_ratio", 0.3 + 0.5 * load, "0")
        out.add("accel_performance_state", 0.0)
        for clock, top in CLOCK_MAX.items():
            scale = 1.0 if clock == "memory" else 0.6 + 0.4 * load
            out.add("accel_clock_hertz", top * scale, clock)
            out.add("accel_clock_max_hertz", top, clock)
        for _, reason in nv.THROTTLE_REASONS:
            active = reason == "sw_power_cap" and capped
            out.add("accel_clock_throttle_active", 1.0 if active else 0.0, reason)
        for _, reason in nv.VIOLATION_FIELDS:
            out.add(
                "accel_clock_violation_seconds_total",
                gpu.throttled if reason == "sw_power_cap" else 0.0,
                reason,
            )
        pcie = 2e9 + 22e9 * load
        out.add("accel_pcie_tx_bytes_per_second", pcie)
        out.add("accel_pcie_rx_bytes_per_second", 1.2 * pcie)
        out.add("accel_pcie_tx_average_bytes_per_second", pcie)
        out.add("accel_pcie_rx_average_bytes_per_second", 1.2 * pcie)
        out.add("accel_pcie_replays_total", 0.0)
        out.add("accel_pcie_link_generation", 5.0)
        out.add("accel_pcie_link_width", 16.0)
        out.add("accel_graphics_engine_active_ratio", load)
        out.add("accel_sm_active_ratio", 0.92 * load)
        out.add("accel_sm_occupancy_ratio", 0.6 * load)
        out.add("accel_dram_active_ratio", 0.7 * load)
        for i, pipe in enumerate(PIPES):
            out.add("accel_pipe_active_ratio", load / (2 + i), pipe)
        link_rate = 12e9 * load  # bytes/s on each link
        out.add("accel_nvlink_tx_average_bytes_per_second", LINKS * link_rate)
        out.add("accel_nvlink_rx_average_bytes_per_second", LINKS * link_rate)
        traffic = 12e9 * (gpu.energy / POWER_LIMIT)  # grows with the work done
        for link in range(LINKS):
            out.add("accel_nvlink_up", 1.0, str(link))
            out.add("accel_nvlink_tx_bytes_total", traffic, str(link))
            out.add("accel_nvlink_rx_bytes_total", traffic, str(link))
            for kind in NVLINK_ERRORS:
                out.add("accel_nvlink_errors_total", 0.0, str(link), kind)
        for _, event in nv.EVENTS:
            out.add("accel_device_events_total", 0.0, event)
        for action in RECOVERY_ACTIONS:
            out.add("accel_device_recovery_action", 1.0 if action == "none" else 0.0, action)
        if processes:
            self._processes(out, load, used)

    def _processes(self, out: Emitter, load: float, used: float) -> None:
        # One training process a GPU. Its pid is this worker's: a real process of this
        # machine, so workload attribution never lands on an unrelated one.
        pid = str(self.pid)
        out.add("accel_processes", 1.0)
        out.add("accel_process_memory_bytes", used - 2 * GIB, pid)
        out.add("accel_process_info", 1.0, pid, "python3 train.py (demo)")
        out.add("accel_process_sm_utilization_ratio", 0.92 * load, pid)
        out.add("accel_process_memory_utilization_ratio", 0.7 * load, pid)
        out.add("accel_process_encoder_utilization_ratio", 0.0, pid)
        out.add("accel_process_decoder_utilization_ratio", 0.0, pid)

    def _slow(self, out: Emitter) -> None:
        degraded = out.position == DEGRADED
        for _, kind in nv.ECC_TYPES:
            for _, counter in nv.ECC_COUNTERS:
                out.add("accel_ecc_errors_total", 0.0, kind, counter)
        for _, cause in nv.RETIREMENT_CAUSES:
            out.add("accel_retired_pages", 0.0, cause)
        out.add("accel_retired_pages_pending", 0.0)
        # The degraded GPU: one row remapped for a correctable error, its remap pending
        # until the GPU is reset (exporter.health: row_remap_pending, degraded).
        out.add("accel_remapped_rows", 1.0 if degraded else 0.0, "corrected")
        out.add("accel_remapped_rows", 0.0, "uncorrected")
        out.add("accel_remapped_rows_pending", 1.0 if degraded else 0.0)
        out.add("accel_remapped_rows_failure", 0.0)
        out.add("accel_sram_ecc_threshold_exceeded", 0.0)
        # An HGX board: the GPUs joined the NVSwitch fabric, which reports no issue.
        for state in FABRIC_STATES:
            out.add("accel_nvidia_fabric_state", 1.0 if state == "completed" else 0.0, state)
        for _, check in FABRIC_HEALTH_BITS:
            out.add("accel_nvidia_fabric_health_issue", 0.0, check)
        out.add("accel_pcie_link_max_generation", 5.0)
        out.add("accel_pcie_link_max_width", 16.0)
        out.add("accel_power_limit_bound_watts", 200.0, "min")
        out.add("accel_power_limit_bound_watts", POWER_LIMIT, "max")
        out.add("accel_power_limit_bound_watts", POWER_LIMIT, "default")

    def close(self) -> None:
        """Nothing to release."""
