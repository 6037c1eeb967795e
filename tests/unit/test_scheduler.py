from __future__ import annotations

import asyncio

from exporter.config.schema import SourceConfig
from exporter.errors import SourceError
from exporter.model import Reading
from exporter.scheduler import Scheduler, backoff_delay, poll_once
from exporter.sources.base import Source
from exporter.store import Store


def test_backoff_grows_and_is_capped():
    assert backoff_delay(5, 0) == 5 and backoff_delay(5, 1) == 5
    assert backoff_delay(5, 2) == 10 and backoff_delay(5, 3) == 20
    assert backoff_delay(5, 20) == 40
    assert backoff_delay(60, 20) == 300
    assert backoff_delay(600, 20) == 600


class Counting(Source):
    def __init__(self, name: str, interval: float, fail: bool = False, delay: float = 0.0) -> None:
        super().__init__(name, SourceConfig(interval=interval, timeout=interval * 4))
        self.fail = fail
        self.delay = delay
        self.running = 0
        self.max_running = 0
        self.starts: list[float] = []

    async def poll(self):
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.starts.append(asyncio.get_running_loop().time())
        try:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise SourceError("nope", "failing on purpose")
            return [Reading("accel_devices", (self.name,), 1.0)]
        finally:
            self.running -= 1


def test_polls_never_overlap_and_failures_back_off():
    async def go():
        slow = Counting("slow", 0.1, delay=0.25)
        bad = Counting("bad", 0.1, fail=True)
        good = Counting("good", 0.1)
        sched = Scheduler(Store(), [slow, bad, good])
        await sched.start()
        await asyncio.sleep(2.0)
        await sched.stop()
        return slow, bad, good, sched

    slow, bad, good, sched = asyncio.run(go())
    assert slow.max_running == 1
    # Failing polls back off: far fewer than the healthy source's.
    assert len(bad.starts) < len(good.starts) / 2
    gaps = [b - a for a, b in zip(bad.starts, bad.starts[1:])]
    assert gaps == sorted(gaps) or gaps[-1] > gaps[0]
    assert sched.schedules["bad"].consecutive_failures == len(bad.starts)


def test_poll_once_converts_everything():
    class Boom(Source):
        async def poll(self):
            raise ZeroDivisionError("x")

    snap, unavailable = asyncio.run(poll_once(Boom("b", SourceConfig(interval=1))))
    assert not snap.ok and snap.outcome.reason == "exception" and not unavailable
