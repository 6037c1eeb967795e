"""NCCL/RCCL job health from the RAS service every NCCL process embeds.

Each configured address is queried once per its own interval (one connection,
one report), the report parsed off the event loop, and the job state tracked
across polls (stall detection needs history). Every RAS query is a job-wide
collective, so with ``role: auto`` only the job's *reporter* - the exporter on
the node with the lowest address that has a responding rank - queries at
``interval`` and exports job and communicator series; the others query at
``follower_interval`` (ten intervals unless set), export their local ranks
only, and take over when the reporter's node stops responding. Only JSON
reports elect: they list every responding rank's node. A text report names
nodes only on its error and warning lines, so it neither elects nor demotes
anyone, and an exporter whose server speaks text acts as reporter.

With ``format: auto``, a JSON report that cannot be parsed makes the address
fall back to text for its next queries; JSON is tried again after
``follower_interval``, twice as late after each further failure in a row.

No job on this node (connection refused) is the normal ``no_job`` state and
the poll succeeds. The poll fails - so the scheduler backs off, sparing a
struggling job further queries - only when every address is ``unreachable`` or
in ``error``; the per-address series are exported either way.

The optional MONITOR stream (NCCL 2.29.2+) runs as one long-lived task per
address and feeds event counters; servers without MONITOR are asked again
after ``follower_interval``. This node's addresses are read from /proc on a
thread of their own, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import time
from collections.abc import Sequence
from typing import Any

from exporter import log
from exporter.catalog.device import INFO_LABELS
from exporter.ccl import ras_readings
from exporter.ccl.hosts import local_addresses, normalize
from exporter.ccl.ras_address import Address
from exporter.ccl.ras_client import (
    PROTOCOL,
    Endpoint,
    QueryOptions,
    RasClientError,
    Resolver,
    monitor,
    query,
    system_resolver,
)
from exporter.ccl.ras_events import MonitorEvent
from exporter.ccl.ras_model import RasParseError, RasReport
from exporter.ccl.ras_state import ProgressTracker, classify, elect_reporter
from exporter.config.ccl import CclRasSourceConfig
from exporter.errors import SourceError
from exporter.family_names import (
    ACCEL_CCL_JOB_INFO,
    ACCEL_CCL_JOB_LAST_PROGRESS_TIMESTAMP_SECONDS,
    ACCEL_CCL_RAS_REPORTER,
    ACCEL_DEVICE_INFO,
)
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source, StoreReader

# Scheduler deadline beyond the query deadline: parsing a large report takes time too.
PARSE_MARGIN_SECONDS = 10.0
# This node's addresses are read again this often (interfaces come and go).
LOCAL_REFRESH_SECONDS = 60.0
# A read of this node's addresses that takes longer is left behind (the last list stays).
LOCAL_READ_TIMEOUT = 5.0
# After unparsable JSON, text is used for follower_interval, doubled per failure up to this.
MAX_TEXT_FALLBACK_SECONDS = 3600.0
# Event types are upper-case words from NCCL; more distinct ones than this are "OTHER".
MAX_EVENT_TYPES = 32
BAD_STATES = frozenset({"unreachable", "error"})
MAX_VERSION_CHARS = 64


class CclRasSource(Source):
    """Queries the RAS service at every configured address."""

    def __init__(
        self,
        name: str,
        config: CclRasSourceConfig,
        *,
        resolver: Resolver = system_resolver,
        proc: str = "/proc",
    ) -> None:
        super().__init__(name, config)
        self.ras = config
        self.resolver = resolver
        self.proc = proc
        self._log = log.get(source=name)
        self._addresses = [Address(Endpoint.parse(text)) for text in config.addresses]
        for entry in self._addresses:
            entry.progress = ProgressTracker(config.stall_polls)
        self._local: frozenset[str] = frozenset()
        self._local_read = -LOCAL_REFRESH_SECONDS
        self._local_call = BlockingCall(f"{name}-addresses")
        self._rng = random.Random()
        self._store: StoreReader | None = None

    def attach(self, store: StoreReader) -> None:
        """Keep the store: the device sources' inventory names the GPU of a local rank."""
        self._store = store

    def _device_uuids(self, library: str) -> dict[int, str]:
        """Device index -> uuid of the vendor whose library the job uses (RCCL: AMD)."""
        if self._store is None:
            return {}
        vendor = "amd" if library == "rccl" else "nvidia"
        out: dict[int, str] = {}
        for r in self._store.view().readings(ACCEL_DEVICE_INFO):
            info = dict(zip(INFO_LABELS, r.labels, strict=False))
            if info.get("vendor") == vendor and info.get("device", "").isdigit():
                out[int(info["device"])] = info.get("uuid", "")
        return out

    # -- timing -------------------------------------------------------------------------

    @property
    def timeout(self) -> float:
        """The scheduler's deadline: the query deadline plus time to parse."""
        return self.ras.poll_timeout + PARSE_MARGIN_SECONDS

    @property
    def stale_after(self) -> float:
        """Long enough for a follower's slow cadence."""
        return max(self.ras.stale_seconds, 3 * self.interval())

    def _reporter(self, entry: Address) -> bool:
        if self.ras.role != "auto":
            return self.ras.role == "reporter"
        return entry.elected is not False

    def _cadence(self, entry: Address) -> float:
        return self.ras.interval if self._reporter(entry) else self.ras.follower_seconds

    def interval(self) -> float:
        """``interval`` while any address is (or may be) reported on, else ``follower_interval``."""
        return min(self._cadence(entry) for entry in self._addresses)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start one MONITOR task per address unless ``monitor: false``."""
        if self.ras.monitor is False:
            return
        for entry in self._addresses:
            entry.monitor_task = asyncio.create_task(
                self._monitor(entry), name=f"{self.name}-monitor-{entry.endpoint.label}"
            )

    async def close(self) -> None:
        """Stop the MONITOR tasks."""
        tasks = [e.monitor_task for e in self._addresses if e.monitor_task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for entry in self._addresses:
            entry.monitor_task = None
            entry.monitor_up = False

    # -- polling --------------------------------------------------------------------------

    async def poll(self) -> Sequence[Reading]:
        """Query every due address; fail only when every address is unreachable or in error."""
        due = self._due(time.monotonic())
        if due:
            await self._refresh_local(time.monotonic())
            await asyncio.gather(*(self._query(entry) for entry in due))
        readings: list[Reading] = []
        for entry in self._addresses:
            readings.extend(entry.readings)
            readings.extend(entry.counters())
        states = [entry.machine.state for entry in self._addresses]
        if all(state in BAD_STATES for state in states):
            first = self._addresses[0]
            detail = "; ".join(f"{e.endpoint.label}: {e.detail}" for e in self._addresses)
            raise SourceError(first.machine.state, detail, readings)
        return readings

    def _due(self, now: float) -> list[Address]:
        # The scheduler paces polls at interval(); only an address on a slower cadence
        # (a follower next to an address we report on) waits for its own turn.
        pace = self.interval()
        slack = 0.5 * pace
        return [
            e
            for e in self._addresses
            if not e.queried or self._cadence(e) <= pace or e.next_due - slack <= now
        ]

    async def _refresh_local(self, now: float) -> None:
        if now - self._local_read < LOCAL_REFRESH_SECONDS and self._local:
            return
        self._local_read = now
        if self.ras.local_addresses:
            self._local = frozenset(normalize(a) for a in self.ras.local_addresses)
            return
        try:
            found = await asyncio.wait_for(
                self._local_call(self._read_local), timeout=LOCAL_READ_TIMEOUT
            )
        except (asyncio.TimeoutError, SourceError) as exc:
            # A stuck /proc read: keep the last list, try again at the next refresh.
            self._log.warning("reading this node's addresses is stuck", error=str(exc))
            return
        self._local = found

    def _read_local(self) -> frozenset[str]:
        # Blocking (/proc, or a resolver call where /proc/net is missing): on a thread.
        found = set(local_addresses(self.proc))
        for entry in self._addresses:
            # RAS bound to a pod or host IP (NCCL_RAS_ADDR): ranks behind it live there.
            with contextlib.suppress(ValueError):
                if not ipaddress.ip_address(normalize(entry.endpoint.host)).is_loopback:
                    found.add(normalize(entry.endpoint.host))
        return frozenset(found)

    def _format(self, entry: Address) -> str:
        entry.fallback = self.ras.format == "auto" and time.monotonic() < entry.text_until
        return "text" if entry.fallback else self.ras.format

    def _json_unreadable(self, entry: Address) -> None:
        if self.ras.format != "auto":
            return
        entry.json_failures += 1
        wait = self.ras.follower_seconds * 2 ** min(entry.json_failures - 1, 16)
        wait = min(wait, max(MAX_TEXT_FALLBACK_SECONDS, self.ras.follower_seconds))
        entry.text_until = time.monotonic() + wait
        self._log.warning(
            "ras json report unreadable, using text",
            address=entry.endpoint.label,
            retry_json_after_seconds=round(wait),
            detail=entry.detail,
        )

    async def _query(self, entry: Address) -> None:
        options = QueryOptions(
            deadline=self.ras.poll_timeout,
            format=self._format(entry),
            verbose=self.ras.verbose,
            max_bytes=self.ras.max_response_bytes,
        )
        started = time.monotonic()
        report: RasReport | None = None
        state, reasons = "healthy", []
        try:
            response = await query(entry.endpoint, options, self.resolver)
            entry.format, entry.peer = response.format, response.peer
            self._note_protocol(entry, response.protocol)
            # Imported here: the report parsers are needed once a RAS service answers,
            # not on every node where no NCCL/RCCL job listens.
            from exporter.ccl.ras_parse import parse_report

            loop = asyncio.get_running_loop()
            report = await loop.run_in_executor(None, parse_report, response.body)
        except RasClientError as exc:
            state, reasons, entry.detail = exc.state, [exc.reason], exc.detail
        except RasParseError as exc:
            state, reasons, entry.detail = "error", ["parse_error"], str(exc)[:500]
            if entry.format == "json":
                self._json_unreadable(entry)
        except Exception as exc:
            state, reasons = self._internal_error(entry, "query", exc)
        if state != "no_job":
            entry.durations.observe(time.monotonic() - started)
        else:
            # The job is gone: a next one starts from scratch (and may have other nodes).
            entry.progress.reset()
            entry.elected = None
        readings: list[Reading] | None = None
        if report is not None:
            try:
                state, reasons = self._judge(entry, report)
                readings = self._readings(entry, state, reasons, report)
                entry.detail = ""
            except Exception as exc:
                state, reasons = self._internal_error(entry, "judge", exc)
                report = None
        entry.queried = True
        entry.next_due = time.monotonic() + self._cadence(entry)
        self._enter(entry, state, reasons)
        if readings is None:
            readings = self._readings(entry, state, reasons, report)
        entry.readings = readings

    def _internal_error(self, entry: Address, step: str, exc: Exception) -> tuple[str, list[str]]:
        # A report (or a failure) this code cannot digest is this address's problem
        # only: the other addresses of the poll still report.
        self._log.error(
            "ras query failed unexpectedly",
            address=entry.endpoint.label,
            step=step,
            error=repr(exc)[:500],
        )
        entry.detail = f"{step} failed: {type(exc).__name__}"
        return "error", ["internal_error"]

    def _judge(self, entry: Address, report: RasReport) -> tuple[str, list[str]]:
        stalled = entry.progress.observe(report, time.time())
        entry.timeouts += report.timeouts
        entry.version = f"{report.library} {report.version}"
        if report.unparsed_lines:
            self._log.debug(
                "ras report lines not understood",
                address=entry.endpoint.label,
                lines=report.unparsed_lines,
            )
        if report.format == "json":
            entry.json_failures = 0
        self._elect(entry, report)
        return classify(report, stalled)

    def _elect(self, entry: Address, report: RasReport) -> None:
        if report.format == "json":
            elected = elect_reporter(report, self._local)
            if elected is None:
                return  # no rank answered at all: the last election holds
        elif entry.fallback:
            return  # text stands in for unreadable JSON for a while: the election holds
        else:
            # The server speaks text: it cannot elect, and an earlier election (an
            # older job's JSON) must not keep this exporter a follower.
            elected = None
        was_reporter = self._reporter(entry)
        entry.elected = elected
        if self._reporter(entry) != was_reporter:
            self._log.info(
                "ras role changed",
                address=entry.endpoint.label,
                role="reporter" if self._reporter(entry) else "follower",
            )

    def _note_protocol(self, entry: Address, protocol: str) -> None:
        """Log once per change a server that announces another protocol number than ours."""
        if protocol == entry.protocol:
            return
        entry.protocol = protocol
        if protocol != str(PROTOCOL):
            self._log.warning(
                "RAS server announces another protocol number; going on, as ncclras does",
                address=entry.endpoint.label,
                server_protocol=protocol,
                client_protocol=PROTOCOL,
            )

    def _enter(self, entry: Address, state: str, reasons: list[str]) -> None:
        entry.reasons = reasons
        first = not entry.machine.state
        previous = entry.machine.move(state)
        bad = state in BAD_STATES | {"degraded", "stalled"}
        # A job already degraded when the daemon starts deserves a line too; a failed
        # first query has its own ("poll failed").
        if previous is None and not (first and state in {"degraded", "stalled"}):
            return
        (self._log.warning if bad else self._log.info)(
            "ccl job state changed" if previous is not None else "ccl job state",
            address=entry.endpoint.label,
            previous=previous or "",
            state=state,
            reasons=reasons,
            detail=entry.detail,
        )

    def _keep_rank(self, entry: Address) -> ras_readings.RankFilter:
        mode = self.ras.rank_series
        if mode == "all" and self._reporter(entry):
            return lambda ref: True
        local = self._local
        return lambda ref: bool(ref.host) and normalize(ref.host) in local

    def _readings(
        self, entry: Address, state: str, reasons: list[str], report: RasReport | None
    ) -> list[Reading]:
        label = entry.endpoint.label
        shown = reasons if state != "healthy" and state != "no_job" else []
        out = ras_readings.state_readings(label, state, shown)
        reporter = self._reporter(entry)
        # Without a job there is nothing to report on: 1 would count an idle node among
        # the jobs' reporters (the role itself still decides the next query's cadence).
        held = reporter and state != "no_job"
        out.append(Reading(ACCEL_CCL_RAS_REPORTER, (label,), 1.0 if held else 0.0))
        if report is None:
            return out
        # The version is the server's text: keep a label value of sane length.
        version = report.version[:MAX_VERSION_CHARS]
        out.append(Reading(ACCEL_CCL_JOB_INFO, (label, report.library, version), 1.0))
        if reporter:
            out.extend(ras_readings.job_readings(label, report))
            if entry.progress.last_progress is not None:
                out.append(
                    Reading(
                        ACCEL_CCL_JOB_LAST_PROGRESS_TIMESTAMP_SECONDS,
                        (label,),
                        entry.progress.last_progress,
                    )
                )
        if self.ras.rank_series != "none":
            out.extend(ras_readings.rank_readings(label, report, self._keep_rank(entry)))
            local = self._local
            out.extend(
                ras_readings.rank_device_readings(
                    label,
                    report,
                    lambda ref: bool(ref.host) and normalize(ref.host) in local,
                    self._device_uuids(report.library),
                )
            )
        return out

    # -- MONITOR stream -----------------------------------------------------------------------

    def _on_event(self, entry: Address, event: MonitorEvent) -> None:
        name = event.event
        if name not in entry.events and len(entry.events) >= MAX_EVENT_TYPES:
            name = "OTHER"
        entry.events[name] = entry.events.get(name, 0) + 1
        if event.event in ("PEER_DEAD", "PEER_TIMEOUT_DEAD", "PEER_UNRESPONSIVE"):
            self._log.warning(
                "ras event",
                address=entry.endpoint.label,
                event_type=event.event,
                peer_host=event.host,
                peer_pid=event.pid,
            )

    async def _monitor(self, entry: Address) -> None:
        label = entry.endpoint.label
        unsupported_logged = False
        while True:
            delay = self.ras.interval
            try:
                malformed = await monitor(
                    entry.endpoint,
                    lambda event: self._on_event(entry, event),
                    handshake_timeout=self.ras.poll_timeout,
                    resolver=self.resolver,
                    on_connected=lambda peer: self._monitor_connected(entry, peer),
                )
                if malformed:
                    self._log.debug("ras monitor malformed events", address=label, count=malformed)
            except RasClientError as exc:
                if exc.reason == "unsupported":
                    delay = self.ras.follower_seconds
                    if not unsupported_logged:
                        unsupported_logged = True
                        self._log.info("ras monitor unsupported (NCCL < 2.29.2)", address=label)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log.error("ras monitor failed", address=label, error=repr(exc))
            if entry.monitor_up:
                self._log.info("ras monitor stream ended", address=label)
            entry.monitor_up = False
            await asyncio.sleep(delay * (1 + self._rng.uniform(0, 0.1)))

    def _monitor_connected(self, entry: Address, peer: str) -> None:
        entry.monitor_up = True
        self._log.info("ras monitor connected", address=entry.endpoint.label, peer=peer)

    # -- /status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per address: state, reasons, role, format, which address answered, version."""
        return {
            "addresses": {
                e.endpoint.label: {
                    "state": e.machine.state or "pending",
                    "reasons": list(e.reasons),
                    "detail": e.detail,
                    "role": "reporter" if self._reporter(e) else "follower",
                    "format": e.format,
                    "peer": e.peer,
                    "version": e.version,
                    "unchanged_polls": e.progress.unchanged,
                    "monitor": e.monitor_up,
                }
                for e in self._addresses
            },
            "local_addresses": sorted(self._local),
        }
