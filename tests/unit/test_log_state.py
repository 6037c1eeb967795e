"""A state is logged once when entered, then at most hourly: never on every probe."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from exporter.config.source import SourceConfig
from exporter.errors import SourceUnavailable
from exporter.logstate import REMINDER_SECONDS, StateLog
from exporter.scheduler import Scheduler
from exporter.sources.base import Source
from exporter.store import Store


class Missing(Source):
    """A source whose library is not on this node (as amdsmi on an NVIDIA node)."""

    def __init__(self) -> None:
        super().__init__("amdsmi", SourceConfig(enabled="auto", interval=0.1, timeout=0.5))
        self.probes = 0

    async def poll(self):
        self.probes += 1
        raise SourceUnavailable("library_not_found", "KeyError: 'libamd_smi.so'")


def test_an_unavailable_source_is_logged_once_over_many_reprobes():
    async def go() -> Missing:
        source = Missing()
        # Reprobed every 50 ms instead of every minute: 2 s is far more than the
        # five reprobes of five minutes in a daemon.
        sched = Scheduler(Store(), [source], reprobe_seconds=0.05)
        await sched.start()
        await asyncio.sleep(2.0)
        await sched.stop()
        return source

    with capture_logs() as logs:
        source = asyncio.run(go())
    assert source.probes >= 5, source.probes
    lines = [line for line in logs if line["event"] == "source unavailable"]
    assert len(lines) == 1, lines
    assert lines[0]["reason"] == "library_not_found"


def test_state_log_reminds_hourly_and_tells_a_new_state_at_once():
    now = [0.0]
    state = StateLog(clock=lambda: now[0])
    logged = []
    # Five minutes of a probe every minute, then an hour later, then another reason.
    for minute in range(5):
        now[0] = minute * 60.0
        logged.append(state.due("amdsmi", ("library_not_found", "x")))
    assert logged == [True, False, False, False, False]
    now[0] = REMINDER_SECONDS
    assert state.due("amdsmi", ("library_not_found", "x"))
    assert not state.due("amdsmi", ("library_not_found", "x"))
    assert state.due("amdsmi", ("driver_not_loaded", "y"))
    # Another key has its own memory; a state that ended is news again.
    assert state.due("nvml", ("library_not_found", "x"))
    state.forget("nvml")
    assert state.due("nvml", ("library_not_found", "x"))


def test_the_unavailable_line_says_how_often_it_is_reprobed():
    async def go() -> None:
        sched = Scheduler(Store(), [Missing()], reprobe_seconds=0.05)
        await sched.start()
        await asyncio.sleep(0.3)
        await sched.stop()

    with capture_logs() as logs:
        asyncio.run(go())
    line = next(line for line in logs if line["event"] == "source unavailable")
    # Re-probed every reprobe interval; only the log line waits an hour to repeat.
    assert line["reprobe_seconds"] == 0.05
    assert line["logged_again"] == "at most hourly while it lasts"
    assert "repeats" not in line


def test_lines_follow_stderr_as_it_is_when_written(monkeypatch):
    """A command run in-process under a swapped stderr that is closed since leaves no logger
    writing into the closed file: later lines go to stderr as it is then."""
    import io
    import sys

    from exporter import log as exporter_log

    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    exporter_log.configure("info", "json")
    logger = exporter_log.get(source="test")
    logger.info("one")
    assert '"event": "one"' in first.getvalue()
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logger.warning("two")  # the same bound logger
    assert '"event": "two"' in second.getvalue()
