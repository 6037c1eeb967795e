"""One asyncio task per source: staggered, jittered, deadline-bound, backing off.

Polls of one source never overlap (each task awaits its own poll). A source that
raises, hangs or times out produces a failed snapshot for itself and nothing
else: other tasks keep their schedule and the HTTP server never waits on a poll.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter import log
from exporter.catalog import CATALOG, MetricSpec
from exporter.errors import (
    UNAVAILABLE_REPROBE_SECONDS,
    SourceError,
    SourcePending,
    SourceUnavailable,
)
from exporter.logstate import StateLog
from exporter.model import OK, Outcome, Reading, Snapshot
from exporter.sources.base import Source
from exporter.store import Store, validate
from exporter.verdict import DeviceHealth

# The backoff delay grows to at most this multiple of the interval (and this long).
BACKOFF_CAP_FACTOR = 8
BACKOFF_CAP_SECONDS = 300.0
# First polls are spread over at most this long, so /metrics is complete quickly.
FIRST_POLL_SPREAD_SECONDS = 0.5
JITTER_FRACTION = 0.05
# A source still getting ready (worker bootstrapping) is asked again this soon.
PENDING_RETRY_SECONDS = 0.5
STOP_GRACE_SECONDS = 2.0


@dataclass
class Schedule:
    """Per-source scheduling state shown in /status."""

    index: int
    next_poll: float | None = None
    consecutive_failures: int = 0
    polling: bool = False
    last_reason: str = ""
    last_detail: str = ""
    last_duration: float | None = None


def backoff_delay(interval: float, failures: int) -> float:
    """Delay before the next poll after ``failures`` consecutive failures."""
    if failures <= 1:
        return interval
    cap = max(interval, min(interval * BACKOFF_CAP_FACTOR, BACKOFF_CAP_SECONDS))
    return float(min(interval * 2 ** (failures - 1), cap))


async def poll_once(
    source: Source,
    catalog: Mapping[str, MetricSpec] = CATALOG,
    *,
    allow_unavailable: bool | None = None,
) -> Snapshot:
    """Poll a source under its deadline; its snapshot (``Store.record`` takes it).

    The outcome is ``unavailable`` when the source said it cannot run here and
    that is allowed to be a normal state (``enabled: auto``, by default), and
    ``pending`` when the source is still getting ready. Readings that do not
    match ``catalog`` (the store's) are dropped and logged. Never raises except
    for cancellation: every failure becomes a snapshot.
    """
    logger = log.get(source=source.name)
    if allow_unavailable is None:
        allow_unavailable = source.auto
    started_wall = time.time()
    started = time.monotonic()
    good: list[Reading] = []
    outcome = OK
    verdicts: tuple[DeviceHealth, ...] = ()
    try:
        try:
            readings: Sequence[Reading] = await asyncio.wait_for(
                source.poll(), timeout=source.timeout
            )
        except SourceError as exc:
            readings = exc.readings
            if isinstance(exc, SourcePending):
                outcome = Outcome(False, exc.reason, exc.detail, pending=True)
            elif isinstance(exc, SourceUnavailable):
                outcome = Outcome(
                    False,
                    exc.reason or "unavailable",
                    exc.detail,
                    unavailable=allow_unavailable,
                    retry_in=exc.retry_in,
                )
            else:
                outcome = Outcome(False, exc.reason, exc.detail)
        # What this poll judged, with or without a result (a poll cut off by its
        # deadline judged nothing: its devices are unknown until the next one).
        verdicts = source.verdicts()
        good, bad = validate(readings, catalog)
        if bad:
            logger.warning("readings dropped", count=len(bad), examples=bad[:3])
    except asyncio.TimeoutError:
        outcome = Outcome(False, "timeout", f"poll exceeded its {source.timeout:g}s deadline")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.error("poll raised", error=repr(exc), traceback=traceback.format_exc(limit=8))
        outcome = Outcome(False, "exception", repr(exc)[:500])
        good, verdicts = [], ()
    duration = time.monotonic() - started
    snapshot = Snapshot(
        source=source.name,
        readings=tuple(good),
        outcome=outcome,
        started_at=started_wall,
        completed_at=time.time(),
        completed_mono=time.monotonic(),
        duration=duration,
        stale_after=source.stale_after,
        health=verdicts,
    )
    return snapshot


class Scheduler:
    """Runs every source on its own timer and writes snapshots to the store.

    ``clock`` (monotonic seconds) and ``sleep`` decide when polls happen; tests
    give a virtual clock and sleep to check the timing rules without waiting.
    """

    def __init__(
        self,
        store: Store,
        sources: Sequence[Source],
        rng: random.Random | None = None,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        *,
        reprobe_seconds: float = UNAVAILABLE_REPROBE_SECONDS,
        state_log: StateLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.reprobe_seconds = reprobe_seconds
        self.state_log = state_log or StateLog()
        self.sources = list(sources)
        self._rng = rng or random.Random()
        self._clock = clock
        self._sleep = sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._on_snapshot = on_snapshot
        self.schedules = {s.name: Schedule(i) for i, s in enumerate(self.sources)}

    def hand_over(self, name: str, to: Scheduler) -> None:
        """Give a running source (its polling task and schedule) to ``to``, not stopped.

        For a reload that leaves the source as it was: its worker, its polls in
        flight and its timing go on under the new runtime. ``to`` must list the
        same source object.
        """
        task = self._tasks.pop(name, None)
        if task is None:
            return
        source = next(s for s in self.sources if s.name == name)
        self.sources.remove(source)
        to._tasks[name] = task
        to.schedules[name] = self.schedules.pop(name)

    async def start(self) -> None:
        """Start every source and its polling task (not those handed over, running already)."""
        for source in self.sources:
            self.store.register(source.name)
            source.attach(self.store)
        for source in self.sources:
            if source.name in self._tasks:
                continue
            self._show_carried(source)
            try:
                await asyncio.wait_for(source.start(), timeout=source.timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a source that cannot start still gets polled (and fails)
                log.get(source=source.name).error("source start failed", error=repr(exc))
            self._tasks[source.name] = asyncio.create_task(
                self._run(source), name=f"source-{source.name}"
            )
            # Let what it started run now (a worker source's supervisor spawns its
            # process): the worker boots while the next sources start, not after them.
            await asyncio.sleep(0)

    def _show_carried(self, source: Source) -> None:
        """Record what a replacing source carried over, as a pending poll would."""
        readings = source.carried()
        if not readings:
            return
        good, _ = validate(readings, self.store.catalog)
        now = time.time()
        self.store.record(
            Snapshot(
                source=source.name,
                readings=tuple(good),
                outcome=Outcome(False, "reloading", "the config was reloaded", pending=True),
                started_at=now,
                completed_at=now,
                completed_mono=time.monotonic(),
                duration=0.0,
                stale_after=source.stale_after,
                health=source.verdicts(),
            )
        )

    async def stop(self) -> None:
        """Cancel polls (hung ones included), then close every source under a deadline."""
        for task in self._tasks.values():
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=STOP_GRACE_SECONDS)
        self._tasks.clear()
        closes = [asyncio.create_task(self._close(s)) for s in self.sources]
        if closes:
            await asyncio.wait(closes, timeout=STOP_GRACE_SECONDS)

    async def _close(self, source: Source) -> None:
        try:
            await asyncio.wait_for(source.close(), timeout=STOP_GRACE_SECONDS)
        except Exception as exc:
            log.get(source=source.name).warning("source close failed", error=repr(exc))

    def _first_delay(self, index: int) -> float:
        count = max(len(self.sources), 1)
        return FIRST_POLL_SPREAD_SECONDS * index / count

    def _phase(self, index: int, interval: float) -> float:
        return interval * index / max(len(self.sources), 1)

    async def _run(self, source: Source) -> None:
        schedule = self.schedules[source.name]
        logger = log.get(source=source.name)
        anchor = self._clock()
        await self._sleep(self._first_delay(schedule.index))
        while True:
            try:
                wait = await self._cycle(source, schedule, logger, anchor)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug in one cycle must not end the source's polling
                logger.error(
                    "poll cycle failed", error=repr(exc), traceback=traceback.format_exc(limit=8)
                )
                wait = source.config.interval
            schedule.next_poll = time.time() + wait
            await self._sleep(wait)

    async def _cycle(self, source: Source, schedule: Schedule, logger: Any, anchor: float) -> float:
        """One poll and its bookkeeping; returns how long to wait before the next."""
        started = self._clock()
        schedule.polling = True
        try:
            # Once a source has worked here (in this process, across reloads), its
            # library vanishing is a failure (a driver unloaded under it), not
            # "this node has no such device".
            snapshot = await poll_once(
                source,
                self.store.catalog,
                allow_unavailable=source.auto and not self.store.succeeded(source.name),
            )
        finally:
            schedule.polling = False
        interval = source.interval()
        unavailable = snapshot.outcome.unavailable
        if snapshot.outcome.pending:
            schedule.last_reason, schedule.last_detail = (
                snapshot.outcome.reason,
                snapshot.outcome.detail,
            )
            # Not a result: no poll or error is counted. What the source still knows
            # (devices down with the reason, while a new worker starts) stays shown.
            self.store.record(snapshot, restarts=source.restarts)
            return min(interval, PENDING_RETRY_SECONDS)
        failures = 0 if snapshot.ok or unavailable else schedule.consecutive_failures + 1
        retry_in = snapshot.outcome.retry_in
        if unavailable:
            # A source that re-probes by itself keeps the one clock; it said when.
            delay = retry_in if retry_in is not None else max(interval, self.reprobe_seconds)
        else:
            delay = backoff_delay(interval, failures) if failures else interval
            if failures and retry_in is not None:
                # A library gone after it worked: a poll before the source looks
                # again could only repeat the same failure.
                delay = max(delay, retry_in)
        if failures or unavailable:
            # What a failed poll says (devices down, the reason, the bus count) stays
            # true until the next poll, however far backoff pushes it: keep it visible.
            keep = delay + source.timeout + JITTER_FRACTION * interval
            if keep > snapshot.stale_after:
                snapshot = dataclasses.replace(snapshot, stale_after=keep)
        self._record(source, snapshot, schedule, logger)
        if not failures and not unavailable:
            # Healthy sources stay on their phase grid so that they never fire together:
            # the next grid point between half and one and a half intervals away.
            phase = self._phase(schedule.index, interval)
            ticks = math.floor((started + 0.5 * interval - anchor - phase) / interval) + 1
            target = anchor + phase + ticks * interval
        else:
            # retry_in counts from when the source answered, not from the poll's start.
            target = (self._clock() if retry_in is not None else started) + delay
        target += self._rng.uniform(0, JITTER_FRACTION * interval)
        return max(0.0, target - self._clock())

    def _record(self, source: Source, snapshot: Snapshot, schedule: Schedule, logger: Any) -> None:
        schedule.last_duration = snapshot.duration
        was_failing = schedule.consecutive_failures > 0
        self.store.record(snapshot, restarts=source.restarts)
        if snapshot.outcome.unavailable:
            # Keyed on the reason and detail, not on last_reason: a device source passes
            # through "pending" (a new worker) before each reprobe says unavailable again.
            state = (snapshot.outcome.reason, snapshot.outcome.detail)
            if self.state_log.due(source.name, state):
                logger.info(
                    "source unavailable",
                    reason=snapshot.outcome.reason,
                    detail=snapshot.outcome.detail,
                    reprobe_seconds=self.reprobe_seconds,
                    logged_again="at most hourly while it lasts",
                )
            schedule.consecutive_failures = 0
            schedule.last_reason = "unavailable"
            schedule.last_detail = snapshot.outcome.detail
        else:
            if snapshot.ok:
                if was_failing or schedule.last_reason == "unavailable":
                    logger.info("source recovered", after_failures=schedule.consecutive_failures)
                self.state_log.forget(source.name)
                schedule.consecutive_failures = 0
                schedule.last_reason = ""
                schedule.last_detail = ""
            else:
                schedule.consecutive_failures += 1
                level = logger.warning if not was_failing else logger.debug
                level(
                    "poll failed",
                    reason=snapshot.outcome.reason,
                    detail=snapshot.outcome.detail,
                    consecutive_failures=schedule.consecutive_failures,
                )
                schedule.last_reason = snapshot.outcome.reason
                schedule.last_detail = snapshot.outcome.detail
        if self._on_snapshot is not None:
            self._on_snapshot(snapshot)
