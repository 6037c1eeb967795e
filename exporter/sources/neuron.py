"""AWS Neuron devices: counted from sysfs, measured by a supervised neuron-monitor.

The child (:mod:`exporter.backends.neuron_monitor`) streams one report per period; each
line is parsed (:mod:`exporter.backends.neuron_report`) as it arrives. Gauges come from
the latest report while it is fresh. Execution counts and ECC events are
per-period deltas: each line's are added once to counters kept here, so the
counters survive the child's restarts, neither reset nor counted twice. A
child that keeps failing leaves the devices listed, ``accel_device_up`` 0
with the reason, and the counters as they were.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter import log
from exporter.backends.neuron_devices import NeuronDevice, scan
from exporter.backends.neuron_monitor import STALL_PERIODS, Monitor
from exporter.backends.sysfs import read_attr
from exporter.catalog.device import INFO_LABELS
from exporter.config.devices import NeuronSourceConfig
from exporter.errors import SourceError, SourcePending, SourceUnavailable
from exporter.model import Reading
from exporter.sources.base import Source

if TYPE_CHECKING:
    from exporter.backends.neuron_report import Report

VENDOR = "aws"
RESCAN_SECONDS = 60.0
_STATUS = "accel_neuron_execution_status_total"
_ERRORS = "accel_neuron_execution_errors_total"


class NeuronSource(Source):
    """Devices from sysfs plus neuron-monitor's reports."""

    def __init__(self, name: str, config: NeuronSourceConfig) -> None:
        super().__init__(name, config)
        self.neuron_config = config
        self.monitor = Monitor(
            config.command, config.interval, config.max_line_bytes, self._on_line, name
        )
        self.devices: list[NeuronDevice] = []
        self._driver = ""
        self._next_scan = 0.0
        self._program: str | None = None
        self._running = False
        self._started_mono = 0.0
        self._latest: Report | None = None
        self._latest_mono = 0.0
        # Node-wide execution counters: (family, label values) -> count since the daemon started.
        self._counts: dict[tuple[str, tuple[str, ...]], float] = {}
        # ECC events by (device index, corrected|uncorrected).
        self._ecc: dict[tuple[int, str], float] = {}
        self._problems: tuple[str, ...] = ()
        self._bad_line = ""
        self._log = log.get(source=name)

    @property
    def restarts(self) -> int:
        """neuron-monitor restarts so far."""
        return self.monitor.state.restarts

    async def start(self) -> None:
        """Count the devices; start neuron-monitor when it can be found."""
        self._rescan()
        await self._start_monitor()

    async def _start_monitor(self) -> None:
        """Start the child once it can be found and there is something to watch."""
        if self._running:
            return
        self._program = self.monitor.resolve()
        if self._program is not None and (self.devices or self.config.enabled is True):
            self._started_mono = time.monotonic()
            await self.monitor.start()
            self._running = True

    async def wait_ready(self, timeout: float) -> None:
        """Wait for neuron-monitor's first report (it prints one per period) or a failure."""
        deadline = time.monotonic() + max(timeout, self.neuron_config.interval + 2.0)
        while self._running and self._latest is None and time.monotonic() < deadline:
            if self.monitor.state.last_reason:
                return
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        """Stop neuron-monitor."""
        await self.monitor.stop()
        self._running = False

    def status(self) -> dict[str, Any]:
        """The child's state, the devices, and what the last report could not be read for."""
        return {
            "vendor": VENDOR,
            "devices": len(self.devices),
            "monitor": vars(self.monitor.state).copy(),
            "report_problems": list(self._problems[:20]),
            "last_rejected_line": self._bad_line,
        }

    def _rescan(self) -> None:
        root = Path(self.neuron_config.host_root or "/")
        self.devices = scan(str(root))
        self._driver = read_attr(root / "sys" / "module" / "neuron" / "version", 64)
        self._next_scan = time.monotonic() + RESCAN_SECONDS

    # -- the child's lines ----------------------------------------------------

    def _on_line(self, line: bytes) -> None:
        # Imported here: the report parser is needed once neuron-monitor runs and
        # prints, not on every node where the source only finds no device.
        from exporter.backends.neuron_report import EXEC_ERRORS, EXEC_STATUS, BadReport, parse

        try:
            report = parse(line)
        except BadReport as exc:
            self.monitor.state.rejected_lines += 1
            self._bad_line = f"{exc} ({len(line)} bytes)"
            self.monitor.note("bad_report", self._bad_line)
            self._log.warning("neuron-monitor line rejected", reason=str(exc), size=len(line))
            return
        first = self._latest is None
        for runtime in report.runtimes:
            self._add(_STATUS, runtime.status)
            self._add(_ERRORS, runtime.errors)
        if first:  # every outcome shows from the start, at 0, so rate() sees the first one
            for status in EXEC_STATUS:
                self._counts.setdefault((_STATUS, (status,)), 0.0)
            for error in EXEC_ERRORS:
                self._counts.setdefault((_ERRORS, (error,)), 0.0)
        for key, count in report.ecc.items():
            self._ecc[key] = self._ecc.get(key, 0.0) + count
        if report.ecc:
            for device in {d for d, _ in report.ecc}:
                for kind in ("corrected", "uncorrected"):
                    self._ecc.setdefault((device, kind), 0.0)
        if report.problems != self._problems:
            if report.problems:
                self._log.warning("neuron-monitor report incomplete", problems=report.problems[:5])
            self._problems = report.problems
        self._latest = report
        self._latest_mono = time.monotonic()

    def _add(self, family: str, deltas: dict[str, int]) -> None:
        for label, count in deltas.items():
            key = (family, (label,))
            self._counts[key] = self._counts.get(key, 0.0) + count

    # -- polls -------------------------------------------------------------

    async def poll(self) -> Sequence[Reading]:
        """Identity, the fresh report's gauges, and the counters."""
        if time.monotonic() >= self._next_scan:
            self._rescan()
        await self._start_monitor()
        if self._program is None:
            reason, detail = "command_not_found", f"{self.neuron_config.command[0]} is not on PATH"
            if not self.devices:
                raise SourceUnavailable("no_devices", f"no Neuron device, and {detail}")
            raise SourceError(reason, detail, self._down(reason))
        if not self.devices and self._latest is None:
            raise SourceUnavailable("no_devices", "no Neuron device in sysfs or /dev")
        fresh_for = STALL_PERIODS * self.neuron_config.interval
        report = self._latest
        if report is None or time.monotonic() - self._latest_mono > fresh_for:
            state = self.monitor.state
            if report is None and not state.last_reason:
                waited = time.monotonic() - self._started_mono
                if waited <= fresh_for:
                    raise SourcePending("starting", "waiting for neuron-monitor's first report")
            reason = state.last_reason or "no_report"
            detail = state.last_detail or f"no report from neuron-monitor for {fresh_for:g}s"
            raise SourceError(reason, detail, self._down(reason))
        return self._identity(up=True) + self._gauges(report) + self._counters()

    def _identity(self, up: bool, reason: str = "") -> list[Reading]:
        out = [Reading("accel_devices", (VENDOR,), float(len(self.devices)))]
        for dev in self.devices:
            info = {
                "vendor": VENDOR,
                "device": str(dev.index),
                "uuid": dev.uuid,
                "model": dev.model,
                "pci_bus_id": dev.pci_bus_id,
                "serial": dev.serial,
                "driver_version": self._driver,
            }
            ident = (str(dev.index), dev.uuid)
            out.append(Reading("accel_device_info", tuple(info.get(k, "") for k in INFO_LABELS), 1))
            out.append(Reading("accel_device_up", ident, 1.0 if up else 0.0))
            if not up:
                out.append(Reading("accel_device_down_reason_info", (*ident, reason), 1.0))
        return out

    def _down(self, reason: str) -> list[Reading]:
        return self._identity(up=False, reason=reason) + self._counters()

    def _gauges(self, report: Report) -> list[Reading]:
        by_index = {dev.index: dev for dev in self.devices}
        per_device = report.hardware.cores_per_device if report.hardware else 0
        per_device = per_device or (self.devices[0].cores if self.devices else 0)
        out = [Reading("accel_neuron_runtimes", (), float(len(report.runtimes)))]
        used: dict[int, float] = dict.fromkeys(by_index, 0.0)
        categories: dict[tuple[int, str], float] = {}
        seen_cores: set[int] = set()
        for runtime in report.runtimes:
            tag = runtime.tag
            if per_device:
                for nc, percent in sorted(runtime.core_utilization.items()):
                    dev = by_index.get(nc // per_device)
                    if dev is None or nc in seen_cores:
                        continue
                    seen_cores.add(nc)
                    out.append(
                        Reading(
                            "accel_neuroncore_utilization_ratio",
                            (str(dev.index), dev.uuid, str(nc)),
                            percent / 100.0,
                        )
                    )
                for nc, memory in runtime.core_memory.items():
                    index = nc // per_device
                    if index not in used:
                        continue
                    used[index] += math.fsum(memory.values())
                    for category, value in memory.items():
                        key = (index, category)
                        categories[key] = categories.get(key, 0.0) + value
            for (kind, percentile), seconds in sorted(runtime.latency.items()):
                out.append(
                    Reading(
                        "accel_neuron_execution_latency_seconds",
                        (tag, kind.removesuffix("_latency"), percentile),
                        seconds,
                    )
                )
            for mode, percent in runtime.vcpu.items():
                out.append(
                    Reading("accel_neuron_runtime_vcpu_usage_ratio", (tag, mode), percent / 100.0)
                )
            for location, value in runtime.memory.items():
                out.append(
                    Reading("accel_neuron_runtime_memory_used_bytes", (tag, location), value)
                )
        total = report.hardware.memory_per_device if report.hardware else 0.0
        for index, dev in by_index.items():
            ident = (str(index), dev.uuid)
            if per_device:  # without the core -> device map, usage cannot be placed
                out.append(Reading("accel_memory_used_bytes", ident, used[index]))
            if total > 0:
                out.append(Reading("accel_memory_total_bytes", ident, total))
        for (index, category), value in sorted(categories.items()):
            dev = by_index[index]
            out.append(
                Reading("accel_neuron_memory_used_bytes", (str(index), dev.uuid, category), value)
            )
        return out

    def _counters(self) -> list[Reading]:
        out = [Reading(family, labels, value) for (family, labels), value in self._counts.items()]
        by_index = {dev.index: dev for dev in self.devices}
        for (index, kind), value in sorted(self._ecc.items()):
            dev = by_index.get(index)
            if dev is not None:
                out.append(
                    Reading("accel_ecc_errors_total", (str(index), dev.uuid, kind, ""), value)
                )
        return out
