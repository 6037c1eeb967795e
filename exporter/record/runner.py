"""Run a command while sampling devices and host; write the run log and the summary.

Order of events: the device and host sources start (workers bootstrap), one
baseline sample is taken, the command starts, samples follow every interval
(never overlapping: a slow poll delays the next), the command exits, one final
sample closes the run. The energy used is therefore measured from just before
the command started to just after it ended; the means and maxima come from the
samples taken while it ran (the baseline and final samples describe the node
without it, so they only delimit the energy, unless the command was shorter than
the interval: then they are all there is, and the summary says so).

Recording never costs the command its exit status: a sampling pass that fails
is logged (``record_error``, once per kind of failure) and the next one runs; a
run log or summary that cannot be written is logged; the command's status is
returned whatever happened to the recording.

Phase markers and samples are ordered by time: a marker whose ``time`` is not
after a sample's completion begins its phase before that sample is counted,
however late the marker is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter import __version__, log
from exporter.catalog.device import INFO_LABELS
from exporter.family_names import (
    ACCEL_DEVICE_DOWN_REASON_INFO,
    ACCEL_DEVICE_EVENTS_TOTAL,
    ACCEL_DEVICE_INFO,
    ACCEL_DEVICE_UP,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_HOST_CPU_RATIO,
    ACCEL_HOST_MEMORY_AVAILABLE_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_POWER_WATTS,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
    ACCEL_XID_ERRORS_TOTAL,
)
from exporter.model import Reading, Snapshot
from exporter.record.phases import Marker, PhaseTail
from exporter.record.runlog import RunLog, write_json
from exporter.record.stats import DeviceSample, RunStats
from exporter.scheduler import poll_once
from exporter.sources.base import Source

PHASE_ENV = "ACCEL_EXPORTER_PHASE_FILE"
PHASE_FILE = "phases.jsonl"
RUN_LOG = "run.jsonl"
SUMMARY = "summary.json"
# How often the phase file is looked at between samples.
PHASE_POLL_SECONDS = 0.2
# Device fields a sample keeps: catalog family -> key in the run log.
DEVICE_FIELDS = {
    ACCEL_MEMORY_USED_BYTES: "memory_used_bytes",
    ACCEL_UTILIZATION_RATIO: "utilization_ratio",
    ACCEL_POWER_WATTS: "power_watts",
    ACCEL_ENERGY_JOULES_TOTAL: "energy_joules_total",
    ACCEL_TEMPERATURE_CELSIUS: "temperature_celsius",
}
# Counters whose increases are events worth a line of their own.
EVENT_COUNTERS = (ACCEL_XID_ERRORS_TOTAL, ACCEL_DEVICE_EVENTS_TOTAL)


@dataclass(frozen=True)
class RecordOptions:
    """What to run and how to sample."""

    out: Path
    command: Sequence[str]
    interval: float = 1.0
    ready_timeout: float = 30.0


def exit_status(returncode: int) -> int:
    """A shell's view of a child's end: its code, or 128 + the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


class Recorder:
    """One recorded run."""

    def __init__(self, options: RecordOptions, sources: Sequence[Source]) -> None:
        self.options = options
        self.sources = list(sources)
        self.log = log.get(source="record")
        self.out = options.out
        self.run_log: RunLog | None = None
        self.stats: RunStats | None = None
        self.tail = PhaseTail(str(self.out / PHASE_FILE))
        self._counters: dict[tuple[str, tuple[str, ...]], float] = {}
        self._failing: set[str] = set()
        # Sources that delivered a good sample: their later new counters are events.
        self._sampled: set[str] = set()
        self._down: set[str] = set()
        self._failures: dict[str, int] = {}
        self._proc: asyncio.subprocess.Process | None = None
        self._pending_signals: list[signal.Signals] = []

    def _failed(self, what: str, exc: BaseException) -> None:
        """A recording step failed: log its first failure, count the rest, go on."""
        count = self._failures.get(what, 0) + 1
        self._failures[what] = count
        if count == 1:
            self.log.error(
                "record_error",
                what=what,
                error=repr(exc),
                detail="recording goes on; later failures of this step are counted, not logged",
            )

    # -- sampling ----------------------------------------------------------

    async def _poll(self) -> list[Snapshot]:
        results = await asyncio.gather(*(poll_once(s) for s in self.sources))
        return [snapshot for snapshot in results if not snapshot.outcome.unavailable]

    def _events(self, when: float, snapshot: Snapshot) -> None:
        assert self.run_log is not None
        name = snapshot.source
        if not snapshot.ok and name not in self._failing:
            self._failing.add(name)
            self.run_log.write(
                "event",
                when,
                event="source_failed",
                source=name,
                reason=snapshot.outcome.reason,
                detail=snapshot.outcome.detail,
            )
        elif snapshot.ok and name in self._failing:
            self._failing.discard(name)
            self.run_log.write("event", when, event="source_recovered", source=name)
        for reading in snapshot.readings:
            if reading.metric == ACCEL_DEVICE_DOWN_REASON_INFO:
                uuid = reading.labels[1]
                if uuid not in self._down:
                    self._down.add(uuid)
                    self.run_log.write(
                        "event", when, event="device_down", uuid=uuid, reason=reading.labels[2]
                    )
            elif reading.metric == ACCEL_DEVICE_UP and reading.value == 1.0:
                if reading.labels[1] in self._down:
                    self._down.discard(reading.labels[1])
                    self.run_log.write("event", when, event="device_up", uuid=reading.labels[1])
            elif reading.metric in EVENT_COUNTERS and isinstance(reading.value, float):
                key = (reading.metric, reading.labels)
                # A series that appears after the source's first sample counted from zero.
                before = self._counters.get(key, 0.0 if name in self._sampled else None)
                self._counters[key] = reading.value
                if before is not None and reading.value > before:
                    self.run_log.write(
                        "event",
                        when,
                        event=reading.metric.removeprefix("accel_").removesuffix("_total"),
                        uuid=reading.labels[1],
                        kind=reading.labels[2],
                        count=reading.value - before,
                    )
        if snapshot.ok:
            self._sampled.add(name)

    def _sample(
        self, snapshots: list[Snapshot], aggregate: bool = True, markers: bool = True
    ) -> None:
        """Count one poll; ``aggregate`` False: only for energy (baseline, final sample).

        With ``markers``, the phase file is read first: markers not later than the
        poll's completion begin their phase before this sample counts, the rest after.
        """
        assert self.run_log is not None and self.stats is not None
        when = max((s.completed_at for s in snapshots), default=time.time())
        later: list[Marker] = []
        if markers:
            pending = self.tail.read()
            cut = next((i for i, m in enumerate(pending) if m.time > when), len(pending))
            self._markers(pending[:cut])
            later = pending[cut:]
        devices: dict[str, dict[str, float]] = {}
        host: dict[str, float] = {}
        for snapshot in snapshots:
            self._events(when, snapshot)
            for reading in snapshot.readings:
                self._take(reading, devices, host)
        for uuid, fields in devices.items():
            self.stats.add_device(
                when,
                uuid,
                DeviceSample(
                    fields.get("memory_used_bytes"),
                    fields.get("utilization_ratio"),
                    fields.get("power_watts"),
                    fields.get("energy_joules_total"),
                ),
                aggregate=aggregate,
            )
        self.stats.add_host(
            host.get("cpu_user_ratio"), host.get("cpu_idle_ratio"), aggregate=aggregate
        )
        self.run_log.write("sample", when, devices=devices, host=host)
        self._markers(later)

    def _take(
        self, reading: Reading, devices: dict[str, dict[str, float]], host: dict[str, float]
    ) -> None:
        assert self.stats is not None
        value = reading.value
        if not isinstance(value, float):
            return
        if reading.metric == ACCEL_DEVICE_INFO:
            labels = dict(zip(INFO_LABELS, reading.labels, strict=False))
            self.stats.identity[labels["uuid"]] = {
                key: labels[key] for key in ("device", "vendor", "model")
            }
        elif reading.metric in DEVICE_FIELDS:
            if reading.metric == ACCEL_TEMPERATURE_CELSIUS and reading.labels[2] != "gpu":
                return
            devices.setdefault(reading.labels[1], {})[DEVICE_FIELDS[reading.metric]] = value
        elif reading.metric == ACCEL_HOST_CPU_RATIO and reading.labels[0] in ("user", "idle"):
            host[f"cpu_{reading.labels[0]}_ratio"] = value
        elif reading.metric == ACCEL_HOST_MEMORY_AVAILABLE_BYTES:
            host["memory_available_bytes"] = value

    def _markers(self, markers: list[Marker]) -> None:
        assert self.run_log is not None and self.stats is not None
        for marker in markers:
            if marker.kind == "phase":
                self.stats.begin_phase(marker.name, marker.time, marker.data)
                self.run_log.write("phase", marker.time, name=marker.name, data=marker.data)
            elif marker.kind == "event":
                self.run_log.write("event", marker.time, event=marker.name, data=marker.data)
            else:
                self.run_log.write("event", marker.time, event="bad_phase_line", detail=marker.name)

    async def _sampler(self, stop: asyncio.Event) -> None:
        """Sample every interval and read the phase file often, until ``stop`` is set."""
        next_sample = time.monotonic() + self.options.interval
        while not stop.is_set():
            if time.monotonic() >= next_sample:
                try:
                    self._sample(await self._poll())
                except Exception as exc:
                    self._failed("sample", exc)
                next_sample += self.options.interval
                next_sample = max(next_sample, time.monotonic())
                continue
            try:
                self._markers(self.tail.read())
            except Exception as exc:
                self._failed("phase file", exc)
            wait = min(PHASE_POLL_SECONDS, max(0.0, next_sample - time.monotonic()))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)

    # -- the run -------------------------------------------------------------

    async def _start_sources(self) -> None:
        for source in self.sources:
            await source.start()
        await asyncio.gather(
            *(source.wait_ready(self.options.ready_timeout) for source in self.sources)
        )

    async def _close_sources(self) -> None:
        for source in self.sources:
            try:
                await asyncio.wait_for(source.close(), timeout=5)
            except Exception as exc:
                self.log.warning("closing a source failed", name=source.name, error=repr(exc))

    async def run(self) -> int:
        """Record one run of the command; its exit status (127/126 when it cannot start)."""
        self.out.mkdir(parents=True, exist_ok=True)
        phase_path = self.out / PHASE_FILE
        phase_path.write_bytes(b"")
        self.run_log = RunLog(self.out / RUN_LOG)
        loop = asyncio.get_running_loop()
        try:
            await self._start_sources()
            baseline = await self._poll()
            started = time.time()
            self.stats = RunStats(started)
            env = dict(os.environ)
            env[PHASE_ENV] = str(phase_path.resolve())
            # Handlers first: a SIGTERM that arrives while the command starts is passed on.
            self._handle_signals(loop)
            try:
                proc = await asyncio.create_subprocess_exec(*self.options.command, env=env)
            except OSError as exc:
                code = 126 if isinstance(exc, PermissionError) else 127
                self.run_log.write("start", started, command=list(self.options.command))
                self.run_log.write("exit", time.time(), status=code, error=str(exc))
                self.stats.finish(time.time())
                self._summary(code, None)
                raise StartError(code, f"cannot run {self.options.command[0]}: {exc}") from None
            self._proc = proc
            for sig in self._pending_signals:
                self._forward(sig)
            self.run_log.write(
                "start",
                started,
                command=list(self.options.command),
                pid=proc.pid,
                hostname=socket.gethostname(),
                phase_file=str(phase_path.resolve()),
                interval_seconds=self.options.interval,
                version=__version__,
                sources=[s.name for s in self.sources],
            )
            try:
                self._sample(baseline, aggregate=False, markers=False)
            except Exception as exc:
                self._failed("sample", exc)
            if not self.stats.identity:
                # Otherwise a summary without devices looks like a recording that broke.
                self.run_log.write("event", started, event="no_devices")
                self.log.warning(
                    "no accelerator found",
                    detail="recording the host only; accel-exporter probe tells why",
                    sources=[s.name for s in self.sources],
                )
            returncode = await self._supervise(proc)
            return await self._finish(returncode, started)
        finally:
            self._restore_signals(loop)
            await self._close_sources()
            self.run_log.close()

    async def _finish(self, returncode: int, started: float) -> int:
        """After the command: final sample, exit record, summary; the command's status."""
        assert self.run_log is not None and self.stats is not None
        ended = time.time()
        status = exit_status(returncode)
        fields: dict[str, Any] = {"status": status, "wall_seconds": ended - started}
        if returncode < 0:
            fields["signal"] = signal.Signals(-returncode).name
        try:
            # Every marker was written before the command ended: count them first.
            self._markers(self.tail.read(final=True))
            self._sample(await self._poll(), aggregate=False, markers=False)
        except Exception as exc:
            self._failed("final sample", exc)
        finally:
            if self._failures:
                fields["record_errors"] = dict(self._failures)
            self.run_log.write("exit", ended, **fields)
            self.stats.finish(ended)
            self._summary(status, fields.get("signal"))
        return status

    def _forward(self, sig: signal.Signals) -> None:
        """Pass ``sig`` on to the command (remembered until the command exists)."""
        if self._proc is None:
            self._pending_signals.append(sig)
            return
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(sig)

    def _handle_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        # A terminal's Ctrl-C reaches the command directly (same process group);
        # record keeps running to write the summary once the command has ended.
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self._forward, sig)

    def _restore_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            loop.remove_signal_handler(sig)

    async def _supervise(self, proc: asyncio.subprocess.Process) -> int:
        """Sample until the command ends; the sampler can never replace its return code."""
        stop = asyncio.Event()
        sampler = asyncio.create_task(self._sampler(stop))
        try:
            return await proc.wait()
        finally:
            stop.set()
            try:
                await sampler
            except Exception as exc:  # _sampler guards each pass; this is a last resort
                self._failed("sampler", exc)

    def _summary(self, status: int, killed_by: str | None) -> None:
        assert self.stats is not None
        document = {
            "command": list(self.options.command),
            "exit_status": status,
            "signal": killed_by,
            "hostname": socket.gethostname(),
            "version": __version__,
            "record_errors": dict(self._failures),
            **self.stats.summary(),
        }
        try:
            write_json(self.out / SUMMARY, document)
        except Exception as exc:
            self._failed("summary", exc)


class StartError(Exception):
    """The command could not be started; ``status`` is the shell's code for it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
