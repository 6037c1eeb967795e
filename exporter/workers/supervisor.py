"""A child process the daemon depends on, run one way: a device worker or neuron-monitor.

Both supervisors (:class:`exporter.workers.runner.WorkerRunner` for the framed worker
protocol, :class:`exporter.sources.neuron_monitor.Monitor` for a line stream) start,
relay, end and restart their child with these, so the two follow the same rules:

- **A session of its own** (:func:`spawn`): the child leads a new process group, so a
  kill of the group reaches whatever it started, and a terminal's signals do not.
- **Dies with the daemon**: ``PR_SET_PDEATHSIG`` (SIGKILL) is set in the child before it
  runs the program, so a SIGKILLed daemon leaves none behind (a cgroup-wide kill is not
  needed). A child that is ours sets it itself, first thing (the worker:
  :mod:`exporter.workers.child`); any other program is started through a small guard
  that sets it and then execs the program (same pid). ``preexec_fn`` is not used: it
  runs Python in the forked child of a threaded daemon, which can deadlock. The death
  signal is sent when the thread that forked the child ends: the event loop's thread.
- **stderr relayed, bounded** (:class:`Relay`): lines per life, characters per line and
  lines per second; a structured line (ours: JSON with an ``event``) at its level if that
  is a known one, the child's keys never colliding with ours
  (:mod:`exporter.child_output`).
- **Ended within a bound** (:func:`end`): asked to exit (its stdin closed, or SIGTERM to
  the group), a grace period, SIGKILL to the group, then a reap that waits at most
  ``REAP_WAIT_SECONDS``. SIGKILL cannot be ignored, but a process in uninterruptible
  sleep inside a driver dies only when the call returns: such a one is left to
  asyncio's child watcher and returned to the caller to account as stuck
  (:class:`exporter.workers.stuck.StuckProcesses`), never waited on.
- **Restarted after a backoff** (:class:`Backoff`) that grows with consecutive bad lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from exporter import child_output
from exporter.backoff import restart_delay

# How long a SIGKILLed child gets to be reaped before it counts as stuck (an ordinary
# process dies in milliseconds; one in a driver's uninterruptible sleep does not die at
# all until the call returns).
REAP_WAIT_SECONDS = 0.3
# A relayed line is cut to this many characters (a raw one; a structured one past
# MAX_STRUCTURED_CHARS is relayed as a raw one).
MAX_LINE_CHARS = 500
MAX_STRUCTURED_CHARS = 16 * 1024
# Lines relayed per second, with bursts of up to RELAY_BURST (a child starting up logs a
# few at once); the rest are dropped and counted in the next relayed line.
RELAY_LINES_PER_SECOND = 20.0
RELAY_BURST = 50

PR_SET_PDEATHSIG = 1
# Run as ``python -I -S -c GUARD <daemon pid> <program> <args...>``: the death signal is
# set, then the program replaces the guard. A daemon gone before the signal was set
# (the guard's parent is no longer it) means no program at all.
GUARD = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    f"    ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL, 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "try:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'cannot run {sys.argv[2]}: {exc}\\n')\n"
    "    os._exit(127)\n"
)


def guarded(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """``argv`` run through the death-signal guard, its program resolved on PATH.

    FileNotFoundError when the program cannot be found (as starting it directly would
    raise), so a missing program is still a failure to start, not an exit status.
    """
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    program = shutil.which(argv[0], path=path) if argv else None
    if program is None:
        raise FileNotFoundError(f"no such program: {argv[0] if argv else ''!r}")
    return [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid()), program, *argv[1:]]


async def spawn(
    argv: Sequence[str],
    *,
    guard: bool,
    stdin: bool,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    limit: int = 2**16,
) -> asyncio.subprocess.Process:
    """Start ``argv`` in a session of its own with piped stdout and stderr (OSError if not).

    ``guard``: set the death signal through :data:`GUARD`; False only for a child that
    sets it itself. ``stdin``: a pipe (the worker's requests) or /dev/null. ``limit``:
    the longest line a reader of its streams accepts.
    """
    command = guarded(argv, env) if guard else list(argv)
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=dict(env) if env is not None else None,
        pass_fds=tuple(pass_fds),
        limit=limit,
    )


def signal_group(proc: asyncio.subprocess.Process, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the child's process group (its session); gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def reap(proc: asyncio.subprocess.Process, within: float = REAP_WAIT_SECONDS) -> bool:
    """Wait at most ``within`` seconds for the child to have exited; whether it has."""
    if proc.returncode is not None:
        return True
    waiter = asyncio.ensure_future(proc.wait())
    done, _ = await asyncio.wait({waiter}, timeout=within)
    if not done:
        waiter.cancel()
    return proc.returncode is not None


async def end(
    proc: asyncio.subprocess.Process,
    *,
    ask: Callable[[], None] | None,
    grace: float,
    reap_within: float = REAP_WAIT_SECONDS,
) -> bool:
    """End the child within ``grace + reap_within`` seconds; True when it was reaped.

    ``ask`` asks it to exit (close its stdin, signal its group), then it gets ``grace``
    seconds; None: killed at once. The group is SIGKILLed (also after a clean exit:
    anything the child forked goes with it) and the child reaped within ``reap_within``.
    False: it did not die (a driver's uninterruptible sleep); the caller counts it stuck.
    """
    try:
        if ask is not None and proc.returncode is None:
            with contextlib.suppress(Exception):  # a pipe already closed, a group gone
                ask()
            await reap(proc, grace)
    finally:
        # Also when cancelled during the grace (a stop that is itself out of time).
        if proc.returncode is None:
            signal_group(proc, signal.SIGKILL)
    reaped = await reap(proc, reap_within)
    signal_group(proc, signal.SIGKILL)  # anything the child forked
    return reaped


def close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close the pipes now, on the loop that owns them.

    Left to the garbage collector, an asyncio subprocess transport closes itself in
    ``__del__``, possibly after its loop has closed, which raises.
    """
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


class Backoff:
    """Consecutive bad lives of a child, and the delay before its next start."""

    def __init__(self) -> None:
        self.failures = 0

    def good(self) -> None:
        """A life that did its work (ready, a line produced): the next delay is the first."""
        self.failures = 0

    def bad(self) -> float:
        """One more bad life; the delay before the next start (:mod:`exporter.backoff`)."""
        self.failures += 1
        return restart_delay(self.failures)


class Relay:
    """One child's stderr, relayed to our log for one life, bounded.

    At most ``per_life`` lines (then one ``<what> output suppressed``), each cut to
    :data:`MAX_LINE_CHARS`, and at most :data:`RELAY_LINES_PER_SECOND` (bursts of
    :data:`RELAY_BURST`): a line over the rate is dropped, and the next one relayed
    says how many were (``dropped``). ``structured``: a JSON line with an ``event`` (our
    own worker's structlog output) is re-logged at its level when that is a known one,
    with ``context`` (what ``logger`` is bound with) and the pid kept ours: a child's key
    of the same name becomes ``child_<key>`` (:func:`exporter.child_output.relay_structured`).
    Anything else is ``<what> output`` with the line, at info, or at debug while
    ``quiet()`` (a worker not ready yet: what a library prints while failing to load,
    which the bootstrap's outcome already says).
    """

    def __init__(
        self,
        logger: Any,
        what: str,
        *,
        pid_key: str,
        per_life: int,
        structured: bool,
        context: Mapping[str, Any] | None = None,
        quiet: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self.what = what
        self.pid_key = pid_key
        self.per_life = per_life
        self.structured = structured
        # Bound on the logger already; the child's copy of "source" is dropped, the
        # child's copy of any other is renamed (relay_structured).
        context = dict(context or {})
        self._replaced: Collection[str] = ("source",)
        self._ours = {k: v for k, v in context.items() if k != "source"}
        self._quiet = quiet
        self._clock = clock
        self._tokens = float(RELAY_BURST)
        self._at = clock()
        self.dropped = 0

    async def drain(self, proc: asyncio.subprocess.Process) -> None:
        """Relay the child's stderr until it ends (run as a task; cancel it at the end)."""
        assert proc.stderr is not None
        pid = proc.pid
        await child_output.drain(
            proc.stderr,
            self.per_life,
            lambda line: self.relay(line, pid),
            lambda: self._log.warning(f"{self.what} output suppressed", **{self.pid_key: pid}),
        )

    def relay(self, line: str, pid: int) -> None:
        """Relay one line of the child ``pid`` (unless over the rate)."""
        if not self._take():
            self.dropped += 1
            return
        ours: dict[str, Any] = {**self._ours, self.pid_key: pid}
        if self.dropped:
            ours["dropped"] = self.dropped
            self.dropped = 0
        event = (
            child_output.structured(line)
            if self.structured and len(line) <= MAX_STRUCTURED_CHARS
            else None
        )
        if event is not None:
            child_output.relay_structured(self._log, event, ours, replaced=self._replaced)
            return
        emit = self._log.debug if self._quiet() else self._log.info
        emit(f"{self.what} output", **ours, line=line[:MAX_LINE_CHARS])

    def _take(self) -> bool:
        now = self._clock()
        elapsed, self._at = now - self._at, now
        self._tokens = min(float(RELAY_BURST), self._tokens + elapsed * RELAY_LINES_PER_SECOND)
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
