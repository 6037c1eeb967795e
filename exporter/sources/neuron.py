"""AWS Neuron devices: counted from sysfs, measured by a supervised neuron-monitor.

The child (:mod:`exporter.sources.neuron_monitor`) streams one report per period; each
line is parsed (:mod:`exporter.host.neuron_report`) as it arrives. Gauges come from
the latest report while it is fresh. Execution counts and ECC events are
per-period deltas: each line's are added once to counters kept here, so the
counters survive the child's restarts, neither reset nor counted twice. A
child that keeps failing leaves the devices listed, ``accel_device_up`` 0
with the reason, and the counters as they were.

Health (:mod:`exporter.health`, the judge every device source runs, its memory kept
in ``health.state_dir`` by :mod:`exporter.sources.health_keeper`): the judge reads
the identity families and the counters, so a growth of a device's uncorrectable
count (``accel_neuron_ecc_uncorrected_errors_total{memory}``: HBM or SRAM) is its
fatal signal, with the action AWS documents (exporter.health_rules); corrected
errors are counted only. A device gone from sysfs stays listed, down with reason
``device_missing`` (the shared rule: reboot the node), judged on that evidence. While
neuron-monitor is down, stalled or starting, the devices present are unknown, with
why: the child's trouble is no evidence about the devices. The node-wide execution
counts (``error="hardware"`` included) carry no device and judge none.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter import health, log
from exporter.catalog.device import INFO_LABELS
from exporter.config.devices import NeuronSourceConfig
from exporter.config.health import HealthConfig
from exporter.errors import SourceError, SourcePending, SourceUnavailable
from exporter.family_names import (
    ACCEL_DEVICE_DOWN_REASON_INFO,
    ACCEL_DEVICE_INFO,
    ACCEL_DEVICE_UP,
    ACCEL_DEVICES,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_EXPORTER_STATE_ERRORS_TOTAL,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_NEURON_ECC_UNCORRECTED_ERRORS_TOTAL,
    ACCEL_NEURON_EXECUTION_ERRORS_TOTAL,
    ACCEL_NEURON_EXECUTION_LATENCY_SECONDS,
    ACCEL_NEURON_EXECUTION_STATUS_TOTAL,
    ACCEL_NEURON_MEMORY_USED_BYTES,
    ACCEL_NEURON_RUNTIME_MEMORY_USED_BYTES,
    ACCEL_NEURON_RUNTIME_VCPU_USAGE_RATIO,
    ACCEL_NEURON_RUNTIMES,
    ACCEL_NEURONCORE_UTILIZATION_RATIO,
)
from exporter.health_api import DeviceReport
from exporter.host.neuron_devices import NeuronDevice, indices, scan
from exporter.host.sysfs import read_attr
from exporter.model import Reading
from exporter.sources.base import Source
from exporter.sources.health_keeper import HealthKeeper
from exporter.sources.neuron_monitor import STALL_PERIODS, Monitor
from exporter.verdict import DeviceHealth

if TYPE_CHECKING:
    from exporter.host.neuron_report import Report

VENDOR = "aws"
RESCAN_SECONDS = 60.0
_STATUS = ACCEL_NEURON_EXECUTION_STATUS_TOTAL
_ERRORS = ACCEL_NEURON_EXECUTION_ERRORS_TOTAL
_UNCORRECTED = ACCEL_NEURON_ECC_UNCORRECTED_ERRORS_TOTAL
# Why a device listed before is down: gone from sysfs and /dev (the shared rule of
# exporter.health_rules.DOWN_ADVICE: reboot the node, then the vendor).
MISSING = "device_missing"
# Why the devices present have an unknown verdict (DeviceHealth.unknown_why).
MONITOR_DOWN = "neuron-monitor down: {}"
MONITOR_STARTING = "neuron-monitor starting"


class NeuronSource(Source):
    """Devices from sysfs plus neuron-monitor's reports."""

    def __init__(
        self, name: str, config: NeuronSourceConfig, health: HealthConfig | None = None
    ) -> None:
        super().__init__(name, config)
        self.neuron_config = config
        self.monitor = Monitor(
            config.command, config.interval, config.max_line_bytes, self._on_line, name
        )
        self.devices: list[NeuronDevice] = []  # present now
        # Every device a scan listed, by index: one gone stays listed, down (MISSING).
        self._known: dict[int, NeuronDevice] = {}
        self._present: frozenset[int] = frozenset()
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
        # Uncorrectable ECC events by (device index, hbm|sram): the judge's fatal signal.
        self._uncorrected: dict[tuple[int, str], float] = {}
        # The health judge and its memory file (health.state_dir), as every device source.
        self._health_config = health or HealthConfig()
        self._keeper = HealthKeeper(name, self._health_config)
        self._verdicts: tuple[DeviceHealth, ...] = ()
        self._problems: tuple[str, ...] = ()
        self._bad_line = ""
        self._gone: list[int] = []
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
        """Stop neuron-monitor; the health memory file is let go (unless a reload took it)."""
        try:
            await self.monitor.stop()
            self._running = False
        finally:
            self._keeper.close()

    def fingerprint(self) -> tuple[Any, ...]:
        """The section and the health section (a changed one rebuilds, adopted)."""
        return (*super().fingerprint(), self._health_config)

    def adopt(self, old: Source) -> None:
        """The replaced source's judge and memory file go on, and the devices it listed."""
        if not isinstance(old, NeuronSource):
            return
        self._keeper = self._keeper.take_over(old._keeper, self._health_config)
        for index, dev in old._known.items():
            self._known.setdefault(index, dev)

    def status(self) -> dict[str, Any]:
        """The child's state, the devices, and what the last report could not be read for."""
        return {
            "vendor": VENDOR,
            "devices": len(self.devices),
            "missing_devices": sorted(set(self._known) - self._present),
            "monitor": vars(self.monitor.state).copy(),
            "report_problems": list(self._problems[:20]),
            "last_rejected_line": self._bad_line,
            "health_state": self._keeper.describe(),
        }

    def verdicts(self) -> tuple[DeviceHealth, ...]:
        """The health verdict of each listed device as the last poll left it."""
        return self._verdicts

    def health_report(self, verdicts: Mapping[str, DeviceHealth]) -> list[DeviceReport]:
        """Each listed device with its verdict in ``verdicts`` (by uuid), for /v1/devices."""
        return [
            DeviceReport(
                VENDOR, index, str(index), dev.uuid, dev.pci_bus_id, verdicts.get(dev.uuid)
            )
            for index, dev in sorted(self._known.items())
        ]

    def _rescan(self) -> None:
        root = Path(self.neuron_config.host_root or "/")
        self.devices = scan(str(root))
        self._present = frozenset(dev.index for dev in self.devices)
        for dev in self.devices:
            self._known[dev.index] = dev
        self._driver = read_attr(root / "sys" / "module" / "neuron" / "version", 64)
        self._next_scan = time.monotonic() + RESCAN_SECONDS
        gone = sorted(set(self._known) - self._present)
        if gone != self._gone:  # a change logged once
            if gone:
                self._log.warning("Neuron devices gone from sysfs", devices=gone)
            else:
                self._log.info("every Neuron device listed is present again")
            self._gone = gone

    # -- the child's lines ----------------------------------------------------

    def _on_line(self, line: bytes) -> None:
        # Imported here: the report parser is needed once neuron-monitor runs and
        # prints, not on every node where the source only finds no device.
        from exporter.host.neuron_report import EXEC_ERRORS, EXEC_STATUS, BadReport, parse

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
        for key, count in report.uncorrected.items():
            self._uncorrected[key] = self._uncorrected.get(key, 0.0) + count
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
        """One poll, the judge's memory recalled before it and kept after it (health_keeper)."""
        async with self._keeper.around_poll():
            return await self._poll()

    async def _poll(self) -> Sequence[Reading]:
        """Identity, the fresh report's gauges, the counters, and their verdicts."""
        self._verdicts = ()
        # Which devices are there is a directory listing, read every poll: a device
        # gone is seen at once; the attributes are read again when the set changes.
        listed = indices(self.neuron_config.host_root)
        if time.monotonic() >= self._next_scan or listed != self._present:
            self._rescan()
        await self._start_monitor()
        if self._program is None:
            reason, detail = "command_not_found", f"{self.neuron_config.command[0]} is not on PATH"
            if not self._known:
                raise SourceUnavailable("no_devices", f"no Neuron device, and {detail}")
            raise SourceError(reason, detail, self._down(reason))
        if not self._known and self._latest is None:
            raise SourceUnavailable("no_devices", "no Neuron device in sysfs or /dev")
        fresh_for = STALL_PERIODS * self.neuron_config.interval
        report = self._latest
        if report is None or time.monotonic() - self._latest_mono > fresh_for:
            state = self.monitor.state
            if report is None and not state.last_reason:
                waited = time.monotonic() - self._started_mono
                if waited <= fresh_for:
                    self._judged([], MONITOR_STARTING)
                    raise SourcePending("starting", "waiting for neuron-monitor's first report")
            reason = state.last_reason or "no_report"
            detail = state.last_detail or f"no report from neuron-monitor for {fresh_for:g}s"
            raise SourceError(reason, detail, self._down(reason))
        return self._judged(self._identity(up=True) + self._gauges(report) + self._counters())

    def _judged(self, readings: list[Reading], unread_why: str = "") -> list[Reading]:
        """``readings`` and the health families of their verdicts (kept for verdicts()).

        ``unread_why``: the devices present were not read (neuron-monitor down or
        starting), so they are unknown with it; a missing device is judged all the same,
        on the evidence of sysfs.
        """
        unread: dict[tuple[str, ...], str] = {}
        if unread_why:
            unread = {(str(d.index), d.uuid): unread_why for d in self.devices}
        self._verdicts = self._keeper.judge.judge(readings, unread)
        return [*readings, *health.readings(self._verdicts)]

    def _identity(self, up: bool, reason: str = "") -> list[Reading]:
        out = [Reading(ACCEL_DEVICES, (VENDOR,), float(len(self.devices)))]
        for index, dev in sorted(self._known.items()):
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
            out.append(Reading(ACCEL_DEVICE_INFO, tuple(info.get(k, "") for k in INFO_LABELS), 1))
            # A device gone from sysfs is down for that, whatever neuron-monitor does.
            why = MISSING if index not in self._present else ("" if up else reason)
            out.append(Reading(ACCEL_DEVICE_UP, ident, 0.0 if why else 1.0))
            if why:
                out.append(Reading(ACCEL_DEVICE_DOWN_REASON_INFO, (*ident, why), 1.0))
        return out

    def _down(self, reason: str) -> list[Reading]:
        """Every device down with ``reason`` (missing ones: MISSING); the present unknown."""
        readings = self._identity(up=False, reason=reason) + self._counters()
        return self._judged(readings, MONITOR_DOWN.format(reason))

    def _gauges(self, report: Report) -> list[Reading]:
        by_index = {dev.index: dev for dev in self.devices}
        per_device = report.hardware.cores_per_device if report.hardware else 0
        per_device = per_device or (self.devices[0].cores if self.devices else 0)
        out = [Reading(ACCEL_NEURON_RUNTIMES, (), float(len(report.runtimes)))]
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
                            ACCEL_NEURONCORE_UTILIZATION_RATIO,
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
                        ACCEL_NEURON_EXECUTION_LATENCY_SECONDS,
                        (tag, kind.removesuffix("_latency"), percentile),
                        seconds,
                    )
                )
            for mode, percent in runtime.vcpu.items():
                out.append(
                    Reading(ACCEL_NEURON_RUNTIME_VCPU_USAGE_RATIO, (tag, mode), percent / 100.0)
                )
            for location, value in runtime.memory.items():
                out.append(Reading(ACCEL_NEURON_RUNTIME_MEMORY_USED_BYTES, (tag, location), value))
        total = report.hardware.memory_per_device if report.hardware else 0.0
        for index, dev in by_index.items():
            ident = (str(index), dev.uuid)
            if per_device:  # without the core -> device map, usage cannot be placed
                out.append(Reading(ACCEL_MEMORY_USED_BYTES, ident, used[index]))
            if total > 0:
                out.append(Reading(ACCEL_MEMORY_TOTAL_BYTES, ident, total))
        for (index, category), value in sorted(categories.items()):
            dev = by_index[index]
            out.append(
                Reading(ACCEL_NEURON_MEMORY_USED_BYTES, (str(index), dev.uuid, category), value)
            )
        return out

    def _counters(self) -> list[Reading]:
        out = [Reading(family, labels, value) for (family, labels), value in self._counts.items()]
        by_index = self._known  # a device gone keeps its counts
        for (index, kind), value in sorted(self._ecc.items()):
            dev = by_index.get(index)
            if dev is not None:
                out.append(Reading(ACCEL_ECC_ERRORS_TOTAL, (str(index), dev.uuid, kind, ""), value))
        for (index, memory), value in sorted(self._uncorrected.items()):
            dev = by_index.get(index)
            if dev is not None:
                out.append(Reading(_UNCORRECTED, (str(index), dev.uuid, memory), value))
        for reason, count in sorted(self._keeper.errors.items()):
            labels = (self.name, reason)
            out.append(Reading(ACCEL_EXPORTER_STATE_ERRORS_TOTAL, labels, float(count)))
        return out
