"""The one child supervisor: bounded end and reap, the death signal, the bounded relay."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter import log
from exporter.workers import supervisor
from exporter.workers.supervisor import Backoff, Relay
from tests.helpers.wait import eventually

REPO = Path(__file__).resolve().parents[2]
# Ignores SIGTERM, says so, then would sleep for a minute.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


async def stubborn(guard: bool = False) -> asyncio.subprocess.Process:
    proc = await supervisor.spawn([sys.executable, "-c", STUBBORN], guard=guard, stdin=False)
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    return proc


def test_a_child_that_ignores_sigterm_is_killed_and_reaped_within_the_bound() -> None:
    grace = 0.5

    async def go() -> tuple[bool, float, int]:
        proc = await stubborn()
        started = time.monotonic()
        reaped = await supervisor.end(
            proc, ask=lambda: supervisor.signal_group(proc, signal.SIGTERM), grace=grace
        )
        elapsed = time.monotonic() - started
        supervisor.close_transport(proc)
        return reaped, elapsed, proc.pid

    reaped, elapsed, pid = asyncio.run(go())
    assert reaped and not alive(pid)
    # SIGTERM was ignored, so it took the grace and the SIGKILL: well within 3x the
    # bound (grace + reap wait), while the child would have slept for 60 s.
    assert elapsed < 3 * (grace + supervisor.REAP_WAIT_SECONDS)


def test_a_reap_waits_no_longer_than_its_bound_for_a_child_that_does_not_exit() -> None:
    within = 0.2

    async def go() -> tuple[bool, float]:
        proc = await stubborn()
        started = time.monotonic()
        reaped = await supervisor.reap(proc, within)
        elapsed = time.monotonic() - started
        assert await supervisor.end(proc, ask=None, grace=0)  # killed: reaped at once
        supervisor.close_transport(proc)
        return reaped, elapsed

    reaped, elapsed = asyncio.run(go())
    assert not reaped
    assert elapsed < 3 * within  # the child would have taken 60 s


def test_a_child_started_through_the_guard_dies_with_its_parent(tmp_path: Path) -> None:
    # A parent that starts a guarded child, prints its pid and waits: SIGKILLed, it
    # cannot end the child, which must go by its death signal.
    parent = textwrap.dedent(
        f"""
        import asyncio, sys
        from exporter.workers import supervisor

        async def main():
            proc = await supervisor.spawn(
                [sys.executable, "-c", {STUBBORN!r}], guard=True, stdin=False
            )
            assert await proc.stdout.readline() == b"ready\\n"
            print(proc.pid, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, env=env, cwd=tmp_path
    ) as proc:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        try:
            assert alive(child)
            proc.kill()
            proc.wait(timeout=10)
            eventually(lambda: not alive(child), timeout=10, what=f"child {child} gone")
        finally:
            if alive(child):
                os.kill(child, signal.SIGKILL)


def test_a_program_that_cannot_be_found_fails_to_start() -> None:
    with pytest.raises(FileNotFoundError):
        supervisor.guarded(["no-such-program-anywhere"], {"PATH": "/nonexistent"})
    command = supervisor.guarded(["sh", "-c", "true"])
    assert command[-3:] == [command[-3], "-c", "true"] and command[-3].endswith("/sh")
    assert command[5] == str(os.getpid())


def test_backoff_grows_with_bad_lives_and_starts_over_after_a_good_one() -> None:
    b = Backoff()
    assert [b.bad(), b.bad(), b.bad()] == [1.0, 2.0, 4.0]
    b.good()
    assert b.bad() == 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def relay(structured: bool, clock: Clock, **context: str) -> Relay:
    return Relay(
        log.get(source="dev", **context),
        "worker",
        pid_key="worker_pid",
        per_life=1000,
        structured=structured,
        context={"source": "dev", **context},
        clock=clock,
    )


def test_the_relay_is_bounded_in_rate_and_says_how_many_it_dropped() -> None:
    clock = Clock()
    r = relay(False, clock)
    with capture_logs() as logs:
        for i in range(supervisor.RELAY_BURST + 10):
            r.relay(f"line {i}", 7)
        clock.now += 1.0  # the rate refills
        r.relay("after", 7)
    assert len(logs) == supervisor.RELAY_BURST + 1
    assert logs[-1]["line"] == "after" and logs[-1]["dropped"] == 10
    assert all("dropped" not in e for e in logs[:-1])


def test_the_relay_cuts_long_lines_and_takes_a_long_json_line_as_raw() -> None:
    clock = Clock()
    r = relay(True, clock)
    huge = '{"event": "big", "x": "' + "y" * supervisor.MAX_STRUCTURED_CHARS + '"}'
    with capture_logs() as logs:
        r.relay("z" * 10_000, 7)
        r.relay(huge, 7)
    assert [e["event"] for e in logs] == ["worker output", "worker output"]
    assert all(len(e["line"]) == supervisor.MAX_LINE_CHARS for e in logs)


def test_a_child_s_key_never_replaces_one_the_logger_is_bound_with() -> None:
    r = relay(True, Clock(), probe_of="[3]")
    with capture_logs() as logs:
        r.relay('{"event": "hello", "level": "error", "probe_of": "spoof", "n": 1}', 7)
        r.relay("raw", 7)
    assert logs[0]["event"] == "hello" and logs[0]["log_level"] == "error"
    assert logs[0]["probe_of"] == "[3]" and logs[0]["child_probe_of"] == "spoof"
    assert logs[0]["worker_pid"] == 7 and logs[0]["n"] == 1
    assert logs[1]["line"] == "raw" and logs[1]["worker_pid"] == 7


def test_an_end_cancelled_during_its_grace_still_kills_the_child() -> None:
    async def go() -> bool:
        proc = await stubborn()
        ending = asyncio.ensure_future(
            supervisor.end(
                proc, ask=lambda: supervisor.signal_group(proc, signal.SIGTERM), grace=30
            )
        )
        await asyncio.sleep(0.2)
        ending.cancel()  # a stop that is itself out of time
        with contextlib.suppress(asyncio.CancelledError):
            await ending
        # Dead of the SIGKILL sent on the way out, long before the child's 60 s sleep.
        reaped = await supervisor.reap(proc, 5)
        supervisor.signal_group(proc)
        supervisor.close_transport(proc)
        return reaped

    assert asyncio.run(go())
