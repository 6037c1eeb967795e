"""Parent side of a worker process: bootstrap, calls with deadlines, kill, reap, respawn.

A supervisor task owns the worker's life. It starts the worker, waits (with a
deadline) for the single ``ready`` or ``error`` frame, then waits for the worker
to die or be killed, and starts it again after a backoff. Calls are
request/response under a deadline; a missed deadline, a crash or a malformed
reply kills the whole process group and reaps it before anything else happens,
so the number of workers never grows and no zombie survives.

Device isolation: before touching device ``i`` the worker says so in a page it
shares with this runner (:mod:`exporter.workers.crumb`). When a call or the
bootstrap misses its deadline, or the worker crashes, the runner reads the page
and asks for a stack dump (:mod:`exporter.workers.stackdump`) before killing
it: device ``i`` and the call are named, the device is *isolated* (a
:class:`Fault`), and a new worker starts at once without it, so one sick GPU
costs that GPU only. The unit of isolation is the physical device: the logical
devices the worker said share one (partitions of an AMD GPU, in the page's
topology) are isolated together, in one deadline. Each isolated physical
device is retried apart, with backoff, by one probe at a time: a worker of its
own for its logical devices, bootstrapped and polled under the same deadlines,
killed and reaped like any worker. When a probe answers, they are released
and the worker restarted with them. A killed process that does not
die (stuck in the driver) is left behind for the device it was stuck on (at
most one per device: no probe runs while it lives) and never blocks the
healthy devices' worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.errors import (
    UNAVAILABLE_REPROBE_SECONDS,
    SourcePending,
    SourceUnavailable,
    WorkerError,
)
from exporter.logstate import StateLog
from exporter.workers import crumb, stackdump
from exporter.workers.protocol import ProtocolError, encode, read_frame

RESTART_BASE_SECONDS = 1.0
RESTART_CAP_SECONDS = 60.0
STDERR_LINES_PER_LIFE = 200
STOP_GRACE_SECONDS = 1.0
# How long a stuck worker gets to write its stack dump after SIGUSR1.
DUMP_WAIT_SECONDS = 0.3
# How long a SIGKILLed worker gets to be reaped before it counts as stuck (an
# ordinary process dies in milliseconds; one in a driver's uninterruptible sleep
# does not die at all until the call returns).
REAP_WAIT_SECONDS = 0.3
# What naming and killing a stuck worker may take after its deadline (the dump
# wait and the reap wait): callers leave this much of their own deadline.
FAULT_BUDGET_SECONDS = DUMP_WAIT_SECONDS + REAP_WAIT_SECONDS
# An isolated device is probed again after 2, 4, 8, ... seconds, at most this far apart.
PROBE_BASE_SECONDS = 2.0
PROBE_CAP_SECONDS = 60.0


@dataclass
class WorkerState:
    """What /status shows about a worker."""

    state: str = "stopped"  # stopped | starting | ready | backoff | unavailable
    pid: int | None = None
    restarts: int = 0
    last_reason: str = ""
    last_detail: str = ""
    next_start: float | None = None
    inventory: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fault:
    """A device isolated from the worker: what it did, since when, how its probes go."""

    index: int  # the library's index of the device
    reason: str  # hung | crashed
    call: str  # the vendor call it was in, "" when the stack dump did not say
    identity: str  # what the worker had learnt of its identity (PCI bus id, uuid)
    since: float  # wall time it was isolated
    probes: int = 0  # failed probes so far
    next_probe: float | None = None  # wall time of the next probe
    stuck_pid: int | None = None  # a killed process still stuck on it
    # The physical device it belongs to ("": itself alone); its siblings share its fate.
    parent: str = ""
    # Isolated with the device named here, which it shares a physical device with.
    sibling_of: int | None = None

    @property
    def unit(self) -> str:
        """What is isolated and probed as one: the physical device."""
        return self.parent or f"#{self.index}"

    def describe(self) -> str:
        """One line for logs and /status."""
        call = self.call or "a vendor call"
        verb = "hung in" if self.reason == "hung" else "crashed the worker in"
        return f"device {self.index} {verb} {call}"


@dataclass(frozen=True)
class Probe:
    """The request a probe of an isolated device must answer to release it."""

    op: str
    args: Mapping[str, Any]
    timeout: float


class DeviceFault(WorkerError):
    """A call failed because of one device, now isolated (see the module docstring)."""

    def __init__(self, reason: str, detail: str, fault: Fault) -> None:
        super().__init__(reason, detail)
        self.fault = fault


def probe_delay(failures: int) -> float:
    """Wait before the next probe of a device after ``failures`` failed probes."""
    return float(min(PROBE_BASE_SECONDS * 2**failures, PROBE_CAP_SECONDS))


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close the pipes now, on the loop that owns them.

    Left to the garbage collector, an asyncio subprocess transport closes
    itself in ``__del__``, possibly after its loop has closed, which raises.
    """
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


def restart_delay(failures: int) -> float:
    """Backoff before the next start after ``failures`` consecutive bad lives."""
    return float(min(RESTART_BASE_SECONDS * 2 ** max(failures - 1, 0), RESTART_CAP_SECONDS))


class WorkerRunner:
    """Runs one backend in a child process and talks to it."""

    def __init__(
        self,
        name: str,
        backend: str,
        config: Mapping[str, Any],
        *,
        bootstrap_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        isolate: bool = True,
    ) -> None:
        self.name = name
        self.backend = backend
        self._failures_logged = StateLog()
        self.config = dict(config)
        self.bootstrap_timeout = bootstrap_timeout
        self.env = dict(env) if env is not None else None
        self.python = python
        self.state = WorkerState()
        self._log = log.get(source=name)
        self._proc: asyncio.subprocess.Process | None = None
        self._ready = asyncio.Event()
        # Set whenever a start attempt has ended (ready, unavailable or failed).
        self._attempt_done = asyncio.Event()
        self._dead = asyncio.Event()
        self._wake = asyncio.Event()
        self._call_lock = asyncio.Lock()
        self._next_id = 0
        self._failures = 0
        self._ended_badly = False
        self._probed_at = 0.0
        self._unreaped: list[asyncio.subprocess.Process] = []
        self._killed_for: tuple[str, str] | None = None
        self._restart_now = False
        self._supervisor: asyncio.Task[None] | None = None
        self._aux: list[asyncio.Task[Any]] = []
        # Device isolation (see the module docstring); off in probes themselves.
        self.isolate = isolate
        self.probe: Probe | None = None
        self.faults: dict[int, Fault] = {}
        self._stuck: dict[int, asyncio.subprocess.Process] = {}
        # One probe per physical device (Fault.unit), however many logical devices it has.
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._page: crumb.Page | None = None
        self._dump: stackdump.DumpFile | None = None
        # Held while a worker starts, so a restart never lands in the middle of one.
        self._switch = asyncio.Lock()
        # Timeout handling that outlives a cancelled caller (see call()).
        self._handling: set[asyncio.Task[Any]] = set()
        self._stopped = False
        # The device a whole-worker timeout was last on: the same one twice is blamed
        # even when earlier devices ate the time (a slow poll, then a hang late in it).
        self._suspect: int | None = None
        # Failed probes of a device when it was last released: a device isolated
        # again resumes its backoff instead of being probed every 2 s.
        self._probe_history: dict[int, int] = {}
        # What earlier attempts at a first inventory learnt of each device (see learnt()).
        self._learnt: dict[int, str] = {}

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        """Start the supervisor (which starts the worker), and the probes of adopted faults."""
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(), name=f"worker-{self.name}")
            for fault in list(self.faults.values()):
                self._schedule_probe(fault)

    def adopt(self, old: WorkerRunner) -> None:
        """Keep the devices ``old`` isolated: it is the runner this one replaces (a reload).

        Without this a reload hands a hung device back to the new worker, which
        hangs on it again, and every other device waits out a deadline (or the
        bootstrap's) before the device is isolated anew. Only between runners of
        the same backend and worker config, where an index names the same device.
        """
        if not self.isolate or old.backend != self.backend or old.config != self.config:
            return
        for index, fault in old.faults.items():
            self.faults[index] = dataclasses.replace(fault, next_probe=None)
        self._probe_history.update(old._probe_history)
        # A process stuck in the driver outlives its runner; probes must not join it.
        self._stuck.update((i, p) for i, p in old._stuck.items() if p.returncode is None)
        if self.faults:
            self._log.info("isolation carried over", devices=sorted(self.faults))

    async def stop(self) -> None:
        """Stop the supervisor and the worker; the worker is reaped before this returns."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
            self._supervisor = None
        self._stopped = True
        try:
            pending = [*self._probes.values(), *self._handling]
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._terminate(graceful=True)
            self.state.state = "stopped"
        finally:
            self._close_files()

    def _close_files(self) -> None:
        if self._page is not None:
            self._page.close()
            self._page = None
        if self._dump is not None:
            self._dump.close()
            self._dump = None

    @property
    def is_ready(self) -> bool:
        """Whether a worker is ready to be called now."""
        return self._ready.is_set()

    @property
    def pid(self) -> int | None:
        """PID of the live worker, if any."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    def request_restart(self) -> None:
        """Skip a pending backoff (used when the operator knows things changed)."""
        self._wake.set()

    async def restart(self, reason: str, detail: str) -> None:
        """End the worker gracefully and start a new one at once: no backoff, no failure.

        For a backend that found its devices changed (a GPU it could not identify
        at bootstrap now can, a MIG mode switched): only a new bootstrap describes
        them anew. Returns once the old worker is reaped; the new one is starting.
        """
        async with self._switch:  # never in the middle of a start
            self._log.info("worker restart", reason=reason, detail=detail)
            # A poll waiting in ready() must wait for the new attempt, not return on
            # the finished one's event (Python 3.12+ wait_for checks it without yielding).
            self._attempt_done.clear()
            self._restart_now = True
            # Asked for, not a failure, but a new process all the same: the next start
            # counts as a restart (once, even if the last worker also ended badly).
            self._ended_badly = True
            await self._terminate(graceful=True)
            self.state.state = "starting"
            self._wake.set()  # in case the supervisor sits in a backoff

    async def _supervise(self) -> None:
        while True:
            self._attempt_done.clear()
            try:
                async with self._switch:
                    ok = await self._launch()
            finally:
                self._attempt_done.set()
            if ok:
                self._failures = 0
                await self._dead.wait()
                if self._restart_now:
                    self._restart_now = False
                    continue
                self._failures += 1
                delay = restart_delay(self._failures)
            elif self._restart_now:
                # A device was isolated at bootstrap: the others are not to blame.
                self._restart_now = False
                continue
            elif self.state.state == "unavailable":
                # Probed again when a poll asks (see ready()), so the scheduler's
                # re-probe cadence is the only one.
                delay = None
            else:
                self._failures += 1
                delay = restart_delay(self._failures)
            if self.state.state != "unavailable":
                self.state.state = "backoff"
            self.state.next_start = time.time() + delay if delay is not None else None
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self.state.next_start = None

    async def _launch(self) -> bool:
        """Start a worker and wait for its first frame. True when it is ready."""
        self._ready.clear()
        self._dead.clear()
        self._killed_for = None
        self._restart_now = False
        self._probed_at = time.monotonic()
        if not await self._previous_gone():
            return False
        if self._ended_badly:
            # The previous worker was killed or died: this start is a restart.
            self.state.restarts += 1
            self._ended_badly = False
        self.state.state = "starting"
        try:
            if self._page is None or self._dump is None:
                self._close_files()
                self._page, self._dump = crumb.Page(), stackdump.DumpFile()
        except OSError as exc:  # no memfd (fd limit, sandbox): no worker either
            self._close_files()
            self._fail("spawn_failed", f"cannot create the worker's shared pages: {exc}")
            return False
        if self.isolate and not self.state.inventory:
            self._learnt.update(self._page.learnt())
        self._page.reset()
        self._dump.clear()
        env = dict(os.environ if self.env is None else self.env)
        env.update(self._page.env())
        env.update(self._dump.env())
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "exporter.workers",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=env,
                pass_fds=(self._page.fd, self._dump.fd),
                limit=2**20,
            )
        except OSError as exc:
            self._fail("spawn_failed", f"cannot start worker: {exc}")
            return False
        self._proc = proc
        self.state.pid = proc.pid
        self._aux = [
            asyncio.create_task(self._drain_stderr(proc)),
        ]
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(
                encode({"type": "init", "backend": self.backend, "config": self.child_config()})
            )
            await proc.stdin.drain()
            first = await asyncio.wait_for(read_frame(proc.stdout), timeout=self.bootstrap_timeout)
        except asyncio.TimeoutError:
            # A start slow over many devices is not the last one's fault: blame a device
            # only if it held the worker for a quarter of the deadline.
            fault = await self._diagnose(proc, "hung", min_held=self.bootstrap_timeout / 4)
            if fault is not None:
                await self._kill_isolating(fault, f"while the worker started ({fault.describe()})")
                return False
            await self._kill(
                "bootstrap_timeout", f"no answer from the worker within {self.bootstrap_timeout:g}s"
            )
            return False
        except (EOFError, ProtocolError, ConnectionError, OSError) as exc:
            fault = await self._diagnose(proc, "crashed", dump=False)
            if fault is not None:
                await self._kill_isolating(fault, f"while the worker started: {exc}")
                return False
            await self._kill("bootstrap_failed", f"worker failed during bootstrap: {exc}")
            return False
        kind = first.get("type")
        if kind == "ready" and isinstance(first.get("inventory"), dict):
            self.state.inventory = first["inventory"]
            self._learnt.clear()  # the inventory says it all now
            self.state.state = "ready"
            self.state.last_reason = ""
            self.state.last_detail = ""
            self._aux.append(asyncio.create_task(self._watch_exit(proc)))
            self._ready.set()
            self._log.info("worker ready", pid=proc.pid, restarts=self.state.restarts)
            self._failures_logged.forget("worker")
            return True
        if kind == "error":
            reason = str(first.get("reason") or "bootstrap_failed")
            detail = str(first.get("detail") or reason)
            await self._terminate(graceful=True)
            if first.get("kind") == "unavailable":
                self.state.state = "unavailable"
                self.state.last_reason, self.state.last_detail = reason, detail
                return False
            self._fail(reason, detail)
            self._ended_badly = True  # a failed bootstrap: the next start is a restart
            return False
        await self._kill("protocol_error", f"unexpected first frame of type {kind!r}")
        return False

    async def _previous_gone(self) -> bool:
        """False (and the reason recorded) while a killed worker has not died.

        A process in uninterruptible sleep inside a driver ignores SIGKILL until
        the call returns; starting another one each backoff would pile them up.
        """
        # Processes stuck on an isolated device do not count: the new worker will
        # not touch that device. One whose culprit is unknown might be stuck on
        # any of them, so it holds back the next worker.
        loop = asyncio.get_running_loop()
        end = loop.time() + STOP_GRACE_SECONDS
        while any(p.returncode is None for p in self._unreaped) and loop.time() < end:
            await asyncio.sleep(0.05)
        self._unreaped = [p for p in self._unreaped if p.returncode is None]
        if self._unreaped:
            pids = ", ".join(str(p.pid) for p in self._unreaped)
            self._fail(
                "worker_unkillable",
                f"killed worker {pids} has not exited (stuck in the driver?); "
                "no new worker until it does",
            )
            return False
        return True

    def _fail(self, reason: str, detail: str) -> None:
        self.state.last_reason = reason
        self.state.last_detail = detail
        # The same failure on every restart (a library that is not there) is one line,
        # then an hourly reminder; /status and the metrics carry it all along.
        if self._failures_logged.due("worker", (reason, detail)):
            self._log.warning("worker failed", reason=reason, detail=detail)

    async def _watch_exit(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self._proc is proc and not self._dead.is_set():
            how = f"signal {-code}" if code < 0 else f"status {code}"
            self._ready.clear()
            if self._killed_for is not None:
                self._fail(*self._killed_for)
            else:
                self._fail("crashed", f"worker exited with {how}")
            self._ended_badly = True
            self._proc = None
            self.state.pid = None
            _close_transport(proc)
            self._dead.set()

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        lines = 0
        while True:
            try:
                raw = await proc.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not raw:
                return
            lines += 1
            if lines <= STDERR_LINES_PER_LIFE:
                self._relay(raw.decode("utf-8", "replace").rstrip(), proc.pid, self._ready.is_set())
            elif lines == STDERR_LINES_PER_LIFE + 1:
                self._log.warning("worker output suppressed", worker_pid=proc.pid)

    def _relay(self, line: str, pid: int, ready: bool) -> None:
        """Re-log a worker's structured line at its level; anything else as raw output.

        Raw output before the worker is ready is what a library prints while
        failing to load (e.g. amdsmi on a node without ROCm, every re-probe);
        the bootstrap's outcome already says it, so those lines go to debug.
        """
        try:
            event = json.loads(line) if line.startswith("{") else None
        except ValueError:
            event = None
        if isinstance(event, dict) and isinstance(event.get("event"), str):
            level = str(event.pop("level", "info"))
            name = event.pop("event")
            event.pop("timestamp", None)
            event.pop("source", None)
            emit = getattr(self._log, level, self._log.info)
            emit(name, worker_pid=pid, **{str(k): v for k, v in event.items()})
        else:
            # Vendor libraries print to stdout/stderr; keep it, bounded.
            emit = self._log.info if ready else self._log.debug
            emit("worker output", worker_pid=pid, line=line[:500])

    async def _kill(self, reason: str, detail: str, fault: Fault | None = None) -> None:
        """Kill the worker's process group, reap it, and record why."""
        self._fail(reason, detail)
        self._ended_badly = True
        await self._terminate(graceful=False, fault=fault)

    async def _kill_isolating(self, fault: Fault, detail: str) -> None:
        """Kill the worker for one device's fault and start a new one at once without it."""
        self._restart_now = True
        await self._kill(fault.reason, detail, fault)
        self._wake.set()  # the exit watcher may have put the supervisor in a backoff
        self._schedule_probe(fault)

    async def _diagnose(
        self,
        proc: asyncio.subprocess.Process,
        reason: str,
        *,
        dump: bool = True,
        min_held: float = 0.0,
    ) -> Fault | None:
        """Which device (and call) the worker was stuck on or crashed in; isolates it.

        None when the worker was not inside a device (a system-wide call, the
        library's own start), when it had been on that device for less than
        ``min_held`` seconds (a poll slow over every device is nobody's fault),
        or, for a crash, when it was not a fatal signal in native code (an
        outside SIGKILL is not the device's doing).
        """
        page, dump_file = self._page, self._dump  # stop() may close them meanwhile
        if not self.isolate or page is None or dump_file is None:
            return None
        seen = page.read()
        if seen.index is None or seen.index in self.faults:
            return None
        if seen.held < min_held and seen.index != self._suspect:
            self._suspect = seen.index  # blamed if the next deadline finds it there again
            return None
        self._suspect = None
        call = ""
        if dump and proc.returncode is None:
            dump_file.clear()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, stackdump.DUMP_SIGNAL)
            loop = asyncio.get_running_loop()
            end = loop.time() + DUMP_WAIT_SECONDS
            while not call and loop.time() < end:
                await asyncio.sleep(0.02)
                call = stackdump.hung_call(dump_file.read(), seen.main_thread)
        else:
            text = dump_file.read()
            # A native crash of the thread reading the device; not of another thread
            # (the event reader), and not an outside SIGKILL (no fatal dump at all).
            if not dump and not stackdump.fatal_on(text, seen.main_thread):
                return None
            call = stackdump.hung_call(text, seen.main_thread)
        parents = page.parents()
        parent = parents[seen.index] if seen.index < len(parents) else ""
        since = time.time()
        fault = Fault(seen.index, reason, call, seen.identity, since, parent=parent)
        fault.probes = self._probe_history.get(seen.index, 0)
        self.faults[seen.index] = fault
        # Its siblings (partitions of the same GPU) go with it: each would hang in
        # turn, one deadline apiece, before the healthy GPUs are served.
        siblings = [
            i for i, p in enumerate(parents) if parent and p == parent and i not in self.faults
        ]
        for i in siblings:
            self.faults[i] = Fault(
                i, reason, call, "", since, fault.probes, parent=parent, sibling_of=seen.index
            )
        self._log.error(
            "device isolated",
            device=seen.index,
            reason=reason,
            call=call or "unknown",
            identity=seen.identity,
            held_seconds=round(seen.held, 3),
            physical_device=parent or None,
            with_siblings=siblings or None,
        )
        return fault

    def child_config(self) -> dict[str, Any]:
        """The backend config a new worker gets: isolated devices skipped."""
        config = dict(self.config)
        if self.faults:
            rules = dict(config.get(crumb.ISOLATION_KEY) or {})
            rules["skip"] = sorted(set(rules.get("skip") or ()) | set(self.faults))
            config[crumb.ISOLATION_KEY] = rules
        return config

    # -- probes of isolated devices ----------------------------------------

    def _schedule_probe(self, fault: Fault) -> None:
        if self.probe is None or self._stopped:
            return
        unit = fault.unit
        running = self._probes.get(unit)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._probe_loop(fault), name=f"probe-{self.name}-{unit}")
        self._probes[unit] = task
        task.add_done_callback(lambda done: self._forget_probe(unit, done))

    def _forget_probe(self, unit: str, task: asyncio.Task[None]) -> None:
        if self._probes.get(unit) is task:
            del self._probes[unit]

    def _unit_faults(self, unit: str) -> list[Fault]:
        """The isolated logical devices of one physical device, by index."""
        return sorted((f for f in self.faults.values() if f.unit == unit), key=lambda f: f.index)

    def _stuck_on(self, index: int) -> bool:
        proc = self._stuck.get(index)
        if proc is not None and proc.returncode is not None:
            self._stuck.pop(index, None)
            fault = self.faults.get(index)
            if fault is not None:
                fault.stuck_pid = None
            self._log.info("stuck worker exited", device=index, worker_pid=proc.pid)
            proc = None
        return proc is not None

    async def _probe_loop(self, fault: Fault) -> None:
        """Probe an isolated physical device with backoff until it answers; then take it back.

        One loop per physical device: its logical devices are probed by one worker
        together and released together.
        """
        unit = fault.unit
        while not self._stopped:
            members = self._unit_faults(unit)
            if not members:
                return
            lead = members[0]
            delay = probe_delay(lead.probes)
            for member in members:
                member.next_probe = time.time() + delay
            await asyncio.sleep(delay)
            members = self._unit_faults(unit)
            if not members:
                return
            for member in members:
                member.next_probe = None
            indices = [m.index for m in members]
            # While a process is still stuck on the device a probe would only join it.
            try:
                stuck = any([self._stuck_on(i) for i in indices])
                answered = not stuck and await self._probe_once(members)
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:  # a bug must not end the probing of this device
                self._log.error("probe failed", devices=indices, error=repr(exc))
                answered = False
            if not answered:
                for member in members:
                    member.probes += 1
                continue
            self._log.info(
                "device answers again", devices=indices, call=lead.call, probes=lead.probes
            )
            async with self._call_lock:  # not in the middle of a poll
                # Released only now: a poll never sees it neither isolated nor served.
                for member in members:
                    self._probe_history[member.index] = member.probes + 1
                    self.faults.pop(member.index, None)
                await self.restart("device_recovered", f"device {indices} answers again")
            return

    async def _probe_once(self, members: list[Fault]) -> bool:
        """One probe: a worker for this physical device alone, bootstrapped and asked."""
        assert self.probe is not None
        indices = [m.index for m in members]
        # The main worker's config (events included): the probe must do all a worker does.
        config = {**self.config, crumb.ISOLATION_KEY: {"only": indices}}
        probe = WorkerRunner(
            self.name,
            self.backend,
            config,
            bootstrap_timeout=self.bootstrap_timeout,
            env=self.env,
            python=self.python,
            isolate=False,
        )
        probe._log = self._log.bind(probe_of=indices)
        try:
            if not await probe._launch():
                return False
            devices = probe.state.inventory.get("devices")
            served = (
                [d.get("index") for d in devices if isinstance(d, dict)]
                if isinstance(devices, list)
                else []
            )
            if served != indices:
                # A device is gone from the library's list (or another took its
                # index): nothing to take back; they stay isolated and named.
                self._log.warning("probe found no such device", devices=indices, found=served)
                return False
            await probe.call(self.probe.op, self.probe.args, timeout=self.probe.timeout)
            return True
        except WorkerError:
            return False
        finally:
            await probe._terminate(graceful=True)
            for proc in probe._unreaped:
                if proc.returncode is None:
                    for member in members:
                        self._stuck[member.index] = proc
                        member.stuck_pid = proc.pid
            probe._close_files()

    def stuck_processes(self) -> int:
        """Killed workers (and probes) that have not exited yet (read-only: /status calls it)."""
        # One process may be stuck for every partition of its GPU: counted once.
        stuck = {id(p): p for p in [*self._stuck.values(), *self._unreaped]}
        return sum(1 for p in stuck.values() if p.returncode is None)

    async def _terminate(self, *, graceful: bool, fault: Fault | None = None) -> None:
        proc = self._proc
        self._proc = None
        self._ready.clear()
        try:
            if proc is not None:
                await self._end(proc, graceful=graceful)
        finally:
            # Also when cancelled mid-way (a daemon shutdown during a kill): the
            # process has had SIGKILL, asyncio's child watcher reaps it, and the
            # pipes are closed here rather than by the garbage collector.
            if proc is not None:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    if fault is not None and fault.index not in self._stuck:
                        # Stuck on the isolated device, which no new worker touches.
                        for member in self._unit_faults(fault.unit):
                            self._stuck[member.index] = proc
                            member.stuck_pid = proc.pid
                        self._log.error(
                            "killed worker stuck", device=fault.index, worker_pid=proc.pid
                        )
                    else:
                        self._unreaped.append(proc)
                _close_transport(proc)
            for task in self._aux:
                task.cancel()
            self._aux = []
            self.state.pid = None
            self._dead.set()

    async def _end(self, proc: asyncio.subprocess.Process, *, graceful: bool) -> None:
        if graceful and proc.returncode is None and proc.stdin is not None:
            # End of input asks the worker to release the library and exit.
            with contextlib.suppress(Exception):
                proc.stdin.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), timeout=STOP_GRACE_SECONDS)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        # Reap, so no zombie is left. SIGKILL cannot be ignored, but a process in
        # uninterruptible sleep inside a driver dies only when the call returns:
        # wait a little, then leave it to asyncio's child watcher (it is counted
        # as stuck meanwhile) rather than hold up everything behind it.
        waiter = asyncio.ensure_future(proc.wait())
        done, _ = await asyncio.wait({waiter}, timeout=REAP_WAIT_SECONDS)
        if not done:
            waiter.cancel()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything the worker forked

    def _kill_now(self, reason: str, detail: str) -> None:
        """Synchronous SIGKILL for use while being cancelled; the exit watcher reaps."""
        proc = self._proc
        self._killed_for = (reason, detail)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    # -- requests ----------------------------------------------------------

    async def ready(self, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` for a ready worker; its inventory, or an error.

        SourcePending while a bootstrap is under way (bounded by its own
        deadline); SourceUnavailable when the library is missing, and when the
        last probe is old, a new probe starts and this answers SourcePending.
        """
        if self._ready.is_set():
            return self.state.inventory
        if self.state.state == "unavailable":
            if self._reprobe_in() <= 0:
                # Starting now, for every caller: a poll right after this one waits for
                # this probe instead of asking for another.
                self._probed_at = time.monotonic()
                self._attempt_done.clear()
                self.state.state = "starting"
                self.request_restart()
                raise SourcePending("probing", "looking for the library again")
            raise self._unavailable()
        if self.state.state in ("starting", "stopped"):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._attempt_done.wait(), timeout=timeout)
            if self._ready.is_set():
                return self.state.inventory
            if self.state.state == "unavailable":
                raise self._unavailable()
            if self.state.state in ("starting", "stopped"):
                raise SourcePending("starting", "the worker is still starting")
        reason = self.state.last_reason or "not_running"
        wait = ""
        if self.state.next_start is not None:
            wait = f"; restart in {max(0.0, self.state.next_start - time.time()):.1f}s"
        raise WorkerError(reason, (self.state.last_detail or "worker not running") + wait)

    def learnt(self) -> dict[int, str]:
        """Identity text of each device the workers identified before any inventory.

        By library index, from the shared page: what a bootstrap that has not
        answered yet (hung on one device, say) has learnt so far, with what
        earlier attempts learnt. Empty once a worker has answered (its inventory
        says it all) and in probes.
        """
        page = self._page
        if not self.isolate or self.state.inventory or page is None:
            return dict(self._learnt) if self.isolate else {}
        return {**self._learnt, **page.learnt()}

    def _reprobe_in(self) -> float:
        """Seconds until the next probe of an unavailable library is due."""
        return self._probed_at + UNAVAILABLE_REPROBE_SECONDS - time.monotonic()

    def _unavailable(self) -> SourceUnavailable:
        # The one re-probe clock is this runner's: the scheduler is told when it runs out.
        return SourceUnavailable(
            self.state.last_reason, self.state.last_detail, retry_in=max(0.0, self._reprobe_in())
        )

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the current start attempt to end, however it ends."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._attempt_done.wait(), timeout=timeout)

    async def call(
        self, op: str, args: Mapping[str, Any], timeout: float, *, blame_after: float | None = None
    ) -> Any:
        """Send one request and return its result; WorkerError on any failure.

        On a missed deadline, a crash or a malformed reply the worker is killed
        and reaped before this raises. If the caller is cancelled mid-call the
        worker is killed too, because its reply would arrive out of turn.
        ``blame_after``: how long the worker must have sat on one device for a
        missed deadline to be that device's fault (default: half of ``timeout``;
        a caller whose ``timeout`` is what was left of a longer one passes half
        of the longer one).
        """
        async with self._call_lock:
            proc = self._proc
            if proc is None or not self._ready.is_set():
                await self.ready(0)
                proc = self._proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            self._next_id += 1
            call_id = self._next_id
            try:
                proc.stdin.write(
                    encode({"type": "call", "id": call_id, "op": op, "args": dict(args)})
                )
                await asyncio.wait_for(proc.stdin.drain(), timeout=timeout)
                reply = await asyncio.wait_for(read_frame(proc.stdout), timeout=timeout)
            except asyncio.TimeoutError:
                # No one may talk to this worker any more; the kill is shielded, so a
                # caller giving up meanwhile leaves neither a half-killed worker nor
                # an unrecorded culprit (stop() waits for it).
                self._ready.clear()
                blame = timeout / 2 if blame_after is None else blame_after
                handled = asyncio.ensure_future(self._after_timeout(proc, op, timeout, blame))
                self._handling.add(handled)
                handled.add_done_callback(self._handling.discard)
                raise await asyncio.shield(handled) from None
            except (EOFError, ConnectionError, BrokenPipeError) as exc:
                fault = await self._diagnose(proc, "crashed", dump=False)
                if fault is not None:
                    detail = f"{fault.describe()}: {exc}"
                    await self._kill_isolating(fault, detail)
                    raise DeviceFault("crashed", detail, fault) from None
                await self._kill("crashed", f"worker died during {op}: {exc}")
                raise WorkerError("crashed", f"worker died during {op}") from None
            except ProtocolError as exc:
                await self._kill("protocol_error", str(exc))
                raise WorkerError("protocol_error", str(exc)) from None
            except asyncio.CancelledError:
                self._kill_now("timeout", f"{op} was abandoned by its caller (deadline)")
                raise
            if reply.get("id") != call_id:
                detail = f"reply id {reply.get('id')!r} does not match request {call_id}"
                await self._kill("protocol_error", detail)
                raise WorkerError("protocol_error", detail)
            self._suspect = None  # it answered: whatever was slow last time moved on
            if reply.get("type") == "fault":
                raise WorkerError(
                    str(reply.get("reason") or "fault"), str(reply.get("detail") or "")
                )
            if reply.get("type") != "result" or "result" not in reply:
                detail = f"unexpected reply of type {reply.get('type')!r}"
                await self._kill("protocol_error", detail)
                raise WorkerError("protocol_error", detail)
            return reply["result"]

    async def _after_timeout(
        self, proc: asyncio.subprocess.Process, op: str, timeout: float, blame_after: float
    ) -> WorkerError:
        """Name and isolate the device a missed deadline is due to, or kill the whole worker."""
        fault = await self._diagnose(proc, "hung", min_held=blame_after)
        if fault is not None:
            detail = f"{fault.describe()}: no answer within {timeout:g}s"
            await self._kill_isolating(fault, detail)
            return DeviceFault("hung", detail, fault)
        await self._kill("timeout", f"{op} did not answer within {timeout:g}s")
        return WorkerError("timeout", f"{op} did not answer within {timeout:g}s")

    async def invalidate(self, reason: str, detail: str) -> None:
        """Kill the worker because its answer made no sense (shape mismatch)."""
        await self._kill(reason, detail)

    def status(self) -> dict[str, Any]:
        """Fields for /status (the restart count is the store's, so it matches the metric)."""
        return {
            "worker_state": self.state.state,
            "worker_pid": self.pid,
            "worker_last_error": (
                f"{self.state.last_reason}: {self.state.last_detail}"
                if self.state.last_reason
                else ""
            ),
            "worker_next_start": self.state.next_start,
            "worker_stuck_processes": self.stuck_processes(),
            "isolated_devices": [
                {
                    "index": f.index,
                    "reason": f.reason,
                    "call": f.call,
                    "identity": f.identity,
                    "since": f.since,
                    "failed_probes": f.probes,
                    "next_probe": f.next_probe,
                    "stuck_pid": f.stuck_pid,
                    "physical_device": f.parent,
                    "isolated_with": f.sibling_of,
                }
                for f in sorted(self.faults.values(), key=lambda f: f.index)
            ],
        }
