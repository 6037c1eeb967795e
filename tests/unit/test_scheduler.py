"""The scheduler's timing rules, on a virtual clock: no test here waits in real time.

``VirtualTime`` gives the scheduler its clock and sleep; ``run_until`` wakes the
sleepers in time order, letting every poll run to completion between wake-ups.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from exporter.config.source import SourceConfig
from exporter.errors import SourceError, SourcePending, SourceUnavailable
from exporter.model import Reading
from exporter.scheduler import (
    BACKOFF_CAP_FACTOR,
    FIRST_POLL_SPREAD_SECONDS,
    JITTER_FRACTION,
    PENDING_RETRY_SECONDS,
    UNAVAILABLE_REPROBE_SECONDS,
    Scheduler,
    backoff_delay,
    poll_once,
)
from exporter.sources.base import Source
from exporter.store import Store

START = 1000.0


class VirtualTime:
    """A monotonic clock that moves only when every task is asleep."""

    def __init__(self) -> None:
        self.now = START
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, delay), next(self._seq), future))
        await future

    async def _settle(self) -> None:
        # Polls are coroutines wrapped in wait_for: a few loop turns finish them.
        for _ in range(20):
            await asyncio.sleep(0)

    async def run_until(self, until: float) -> None:
        await self._settle()
        while self._sleepers and self._sleepers[0][0] <= until:
            when, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, when)
            if not future.cancelled():
                future.set_result(None)
            await self._settle()
        self.now = until


class Scripted(Source):
    """Answers each poll from ``script`` (the last entry repeats) and notes when."""

    def __init__(
        self,
        name: str,
        interval: float,
        script: Sequence[str] = ("ok",),
        time: VirtualTime | None = None,
        enabled: bool | str = True,
        busy: float = 0.0,
    ) -> None:
        super().__init__(name, SourceConfig(enabled=enabled, interval=interval))
        self.script = list(script)
        self.time = time
        self.busy = busy
        self.starts: list[float] = []
        self.running = 0
        self.max_running = 0

    async def poll(self) -> list[Reading]:
        assert self.time is not None
        self.starts.append(self.time.now)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.busy:
                await self.time.sleep(self.busy)
            what = self.script.pop(0) if len(self.script) > 1 else self.script[0]
            if what == "fail":
                raise SourceError("nope", "failing on purpose")
            if what == "pending":
                raise SourcePending("starting", "the worker is still starting")
            if what.startswith("unavailable"):
                # "unavailable@12.5": the source re-probes by itself in 12.5 s.
                _, _, retry = what.partition("@")
                raise SourceUnavailable(
                    "library_not_found",
                    "libfake.so.1 not found",
                    retry_in=float(retry) if retry else None,
                )
            return [Reading("accel_devices", (self.name,), 1.0)]
        finally:
            self.running -= 1


class FixedJitter:
    """An rng whose jitter is always ``value`` (and says what range it was asked for)."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, low: float, high: float) -> float:
        self.ranges.append((low, high))
        return self.value


def run_schedule(
    make: Callable[[VirtualTime], list[Scripted]], until: float, rng: Any = None, store=None
) -> tuple[list[Scripted], Scheduler, Store]:
    """Run a scheduler over the sources ``make`` builds for ``until`` virtual seconds."""
    time = VirtualTime()
    sources = make(time)
    for source in sources:
        source.time = time
    store = store or Store()
    sched = Scheduler(store, sources, rng=rng or FixedJitter(), clock=time.clock, sleep=time.sleep)

    async def go() -> None:
        await sched.start()
        await time.run_until(START + until)
        await sched.stop()

    asyncio.run(asyncio.wait_for(go(), timeout=60))
    return sources, sched, store


def gaps(starts: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(starts)]


# -- backoff ---------------------------------------------------------------------------


def test_backoff_grows_and_is_capped():
    assert backoff_delay(5, 0) == 5 and backoff_delay(5, 1) == 5
    assert backoff_delay(5, 2) == 10 and backoff_delay(5, 3) == 20
    assert backoff_delay(5, 20) == 5 * BACKOFF_CAP_FACTOR
    assert backoff_delay(60, 20) == 300
    assert backoff_delay(600, 20) == 600


def test_failures_back_off_on_the_schedule_and_recover_to_the_interval():
    script = ["fail"] * 6 + ["ok"] * 3
    (bad,), sched, _ = run_schedule(lambda t: [Scripted("bad", 1.0, script)], until=80)
    # After the n-th consecutive failure the next poll waits backoff_delay(interval, n);
    # the first success puts the source back on its interval.
    assert gaps(bad.starts)[:8] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 1.0, 1.0]
    assert sched.schedules["bad"].consecutive_failures == 0


def test_polls_of_one_source_never_overlap():
    # Each poll takes three intervals: the next starts only after it ended.
    (slow,), _, _ = run_schedule(lambda t: [Scripted("slow", 1.0, busy=3.0)], until=30)
    assert slow.max_running == 1
    assert len(slow.starts) >= 5
    assert all(gap >= 3.0 for gap in gaps(slow.starts))


# -- phase grid and jitter -------------------------------------------------------------


def test_first_polls_are_spread_then_each_source_keeps_its_phase():
    count, interval = 4, 2.0
    sources, _, _ = run_schedule(
        lambda t: [Scripted(f"s{i}", interval) for i in range(count)], until=40
    )
    for i, source in enumerate(sources):
        # The first poll comes within the spread, in source order.
        assert source.starts[0] == pytest.approx(START + FIRST_POLL_SPREAD_SECONDS * i / count)
        # Later polls sit on the source's own grid point: anchor + i/count of the
        # interval + whole intervals, so that sources never fire together.
        for at in source.starts[1:]:
            offset = (at - START - interval * i / count) % interval
            assert min(offset, interval - offset) == pytest.approx(0.0, abs=1e-6), (i, at)
        assert gaps(source.starts[1:]) == [interval] * (len(source.starts) - 2)


def test_the_poll_duration_does_not_push_the_grid():
    # Each poll takes 0.4 of the interval: the next still starts on the grid point (not
    # an interval after the poll ended), so the period stays the interval.
    (s,), _, _ = run_schedule(lambda t: [Scripted("s", 1.0, busy=0.4)], until=20)
    assert len(s.starts) >= 15
    assert all((at - START) % 1.0 == pytest.approx(0.0, abs=1e-6) for at in s.starts[1:])
    assert set(gaps(s.starts[1:])) == {1.0}


def test_jitter_is_up_to_five_percent_of_the_interval_and_is_added():
    rng = FixedJitter(0.05)
    (s,), _, _ = run_schedule(lambda t: [Scripted("s", 1.0)], until=10, rng=rng)
    assert set(rng.ranges) == {(0, JITTER_FRACTION * 1.0)}
    # Every poll after the first lands ``jitter`` after its grid point.
    assert all((at - START) % 1.0 == pytest.approx(0.05) for at in s.starts[1:])


# -- stale extension -------------------------------------------------------------------


def test_a_failed_polls_snapshot_stays_visible_until_the_next_poll():
    snapshots = []
    script = ["ok"] + ["fail"] * 5
    time = VirtualTime()
    source = Scripted("bad", 1.0, script, time=time)
    sched = Scheduler(
        Store(),
        [source],
        rng=FixedJitter(),
        clock=time.clock,
        sleep=time.sleep,
        on_snapshot=snapshots.append,
    )

    async def go() -> None:
        await sched.start()
        await time.run_until(START + 40)
        await sched.stop()

    asyncio.run(asyncio.wait_for(go(), timeout=60))
    ok, *failed = snapshots[:6]
    assert ok.ok and ok.stale_after == source.stale_after  # a success: the configured value
    for n, snap in enumerate(failed, start=1):
        delay = backoff_delay(1.0, n)
        # Kept at least until the next poll (delay), its deadline and the jitter.
        assert snap.stale_after == max(source.stale_after, delay + source.timeout + 0.05)
    assert failed[-1].stale_after > source.stale_after  # the backoff outgrew the default


# -- pending and unavailable -----------------------------------------------------------


def test_a_pending_source_is_asked_again_soon_and_counts_no_failure():
    script = ["pending"] * 3 + ["ok"]
    (s,), sched, store = run_schedule(lambda t: [Scripted("w", 5.0, script)], until=20)
    assert gaps(s.starts)[:3] == [PENDING_RETRY_SECONDS] * 3
    assert sched.schedules["w"].consecutive_failures == 0
    (record,) = store.records()
    assert dict(record.errors) == {}


def test_an_unavailable_auto_source_is_reprobed_on_one_clock():
    script = ["unavailable"] * 3 + ["ok"]
    (s,), sched, store = run_schedule(
        lambda t: [Scripted("nvml", 5.0, script, enabled="auto")], until=200
    )
    # Unavailable is not a failure: no backoff, a re-probe every UNAVAILABLE_REPROBE_SECONDS.
    assert gaps(s.starts)[:3] == [UNAVAILABLE_REPROBE_SECONDS] * 3
    assert sched.schedules["nvml"].consecutive_failures == 0
    assert gaps(s.starts)[3:6] == [5.0] * 3  # found: back on its interval
    (record,) = store.records()
    assert record.unavailable is None and dict(record.errors) == {}


def test_a_source_with_its_own_reprobe_clock_is_polled_when_it_runs_out():
    # The runner said it looks again in 12.5 s, counted from its answer (the poll took 2 s).
    script = ["unavailable@12.5", "unavailable@30", "ok"]
    (s,), sched, _ = run_schedule(
        lambda t: [Scripted("nvml", 5.0, script, enabled="auto", busy=2.0)], until=100
    )
    assert gaps(s.starts)[:2] == [14.5, 32.0]
    # Found: back on its interval's phase grid.
    assert gaps(s.starts)[3:6] == [5.0] * 3
    assert sched.schedules["nvml"].consecutive_failures == 0


def test_a_failing_source_is_not_polled_before_its_own_reprobe_clock():
    # Worked once, then its library vanished: a failure, but a poll before the runner
    # looks again (40 s) would only repeat it; backoff alone would poll after 1 s.
    script = ["ok", "unavailable@40", "unavailable@40", "ok"]
    (s,), sched, _ = run_schedule(
        lambda t: [Scripted("nvml", 1.0, script, enabled="auto")], until=100
    )
    assert gaps(s.starts)[:3] == [1.0, 40.0, 40.0]
    assert sched.schedules["nvml"].consecutive_failures == 0  # recovered


def test_unavailable_after_success_is_a_failure():
    # Once it has worked here, the library vanishing is a fault (a driver unloaded).
    script = ["ok", "unavailable", "unavailable"]
    (s,), sched, store = run_schedule(
        lambda t: [Scripted("nvml", 1.0, script, enabled="auto")], until=4
    )
    assert gaps(s.starts)[:2] == [1.0, 1.0]  # the first failure waits one interval
    assert sched.schedules["nvml"].consecutive_failures >= 2
    (record,) = store.records()
    assert record.unavailable is None and sum(dict(record.errors).values()) >= 2


def test_poll_once_converts_everything():
    class Boom(Source):
        async def poll(self):
            raise ZeroDivisionError("x")

    snap = asyncio.run(poll_once(Boom("b", SourceConfig(interval=1))))
    assert not snap.ok and snap.outcome.reason == "exception" and not snap.outcome.unavailable


def test_poll_once_says_unavailable_only_where_allowed():
    class Missing(Source):
        async def poll(self):
            raise SourceUnavailable("library_not_found", "gone")

    auto = Missing("a", SourceConfig(enabled="auto", interval=1))
    assert asyncio.run(poll_once(auto)).outcome.unavailable
    assert not asyncio.run(poll_once(auto, allow_unavailable=False)).outcome.unavailable
    forced = Missing("f", SourceConfig(enabled=True, interval=1))
    snap = asyncio.run(poll_once(forced))
    assert (
        not snap.ok and not snap.outcome.unavailable and snap.outcome.reason == "library_not_found"
    )
