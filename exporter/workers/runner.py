"""Parent side of a worker process: bootstrap, calls with deadlines, kill, reap, respawn.

A supervisor task owns the worker's life. It starts the worker, waits (with a
deadline) for the single ``ready`` or ``error`` frame, then waits for the worker
to die or be killed, and starts it again after a backoff. Calls are
request/response under a deadline; a missed deadline, a crash or a malformed
reply kills the whole process group and reaps it before anything else happens,
so the number of workers never grows and no zombie survives.

Device isolation (one sick GPU costs that GPU only) is done beside it: which
device a fault is due to and what is isolated (:mod:`exporter.workers.isolation`),
the probes that retry an isolated device apart (:mod:`exporter.workers.probes`,
through this runner's public probe API) and the killed processes that do not die
(:mod:`exporter.workers.stuck`). This module starts a new worker without the
isolated devices at once, and takes them back when their probe answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter import child_output, log
from exporter.backend_api.crumb import ISOLATION_KEY
from exporter.backoff import restart_delay
from exporter.errors import (
    UNAVAILABLE_REPROBE_SECONDS,
    SourcePending,
    SourceUnavailable,
    WorkerError,
)
from exporter.logstate import StateLog
from exporter.workers import crumb, stackdump
from exporter.workers.isolation import DUMP_WAIT_SECONDS, DeviceFault, Fault, Isolation, Probe
from exporter.workers.probes import Prober
from exporter.workers.protocol import ProtocolError, encode, read_frame
from exporter.workers.stuck import StuckProcesses

STDERR_LINES_PER_LIFE = 200
STOP_GRACE_SECONDS = 1.0
# How long a SIGKILLed worker gets to be reaped before it counts as stuck (an
# ordinary process dies in milliseconds; one in a driver's uninterruptible sleep
# does not die at all until the call returns).
REAP_WAIT_SECONDS = 0.3
# What naming and killing a stuck worker may take after its deadline (the dump
# wait and the reap wait): callers leave this much of their own deadline.
FAULT_BUDGET_SECONDS = DUMP_WAIT_SECONDS + REAP_WAIT_SECONDS


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


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close the pipes now, on the loop that owns them.

    Left to the garbage collector, an asyncio subprocess transport closes
    itself in ``__del__``, possibly after its loop has closed, which raises.
    """
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


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
        log_context: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self._failures_logged = StateLog()
        self.config = dict(config)
        self.bootstrap_timeout = bootstrap_timeout
        self.env = dict(env) if env is not None else None
        self.python = python
        self.state = WorkerState()
        self._log = log.get(source=name).bind(**(log_context or {}))
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
        self._killed_for: tuple[str, str] | None = None
        self._restart_now = False
        self._supervisor: asyncio.Task[None] | None = None
        self._aux: list[asyncio.Task[Any]] = []
        # Device isolation (see the module docstring); off in probes themselves.
        self.isolation = Isolation(self._log, enabled=isolate)
        self.stuck = StuckProcesses(self._log)
        self._prober = Prober(
            name,
            self.isolation,
            self.stuck,
            spawn=self.probe_runner,
            take_back=self.take_back,
            log=self._log,
        )
        self._page: crumb.Page | None = None
        self._dump: stackdump.DumpFile | None = None
        # Held while a worker starts, so a restart never lands in the middle of one.
        self._switch = asyncio.Lock()
        # Timeout handling that outlives a cancelled caller (see call()).
        self._handling: set[asyncio.Task[Any]] = set()
        # What earlier attempts at a first inventory learnt of each device (see learnt()).
        self._learnt: dict[int, str] = {}

    @property
    def isolate(self) -> bool:
        """Whether this runner isolates devices (not in a probe)."""
        return self.isolation.enabled

    @property
    def faults(self) -> dict[int, Fault]:
        """The isolated devices, by library index."""
        return self.isolation.faults

    @property
    def probe(self) -> Probe | None:
        """The request a probe of an isolated device must answer (None: no probes)."""
        return self._prober.request

    @probe.setter
    def probe(self, request: Probe | None) -> None:
        self._prober.request = request

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        """Start the supervisor (which starts the worker), and the probes of adopted faults."""
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(), name=f"worker-{self.name}")
            for fault in list(self.faults.values()):
                self._prober.schedule(fault)

    def adopt(self, old: WorkerRunner) -> None:
        """Keep the devices ``old`` isolated: it is the runner this one replaces (a reload).

        Without this a reload hands a hung device back to the new worker, which
        hangs on it again, and every other device waits out a deadline (or the
        bootstrap's) before the device is isolated anew. Only between runners of
        the same backend and worker config, where an index names the same device.
        """
        if not self.isolate or old.backend != self.backend or old.config != self.config:
            return
        self.isolation.adopt(old.isolation)
        # A process stuck in the driver outlives its runner; probes must not join it.
        self.stuck.adopt(old.stuck)
        if self.faults:
            self._log.info("isolation carried over", devices=sorted(self.faults))

    async def stop(self) -> None:
        """Stop the supervisor and the worker; the worker is reaped before this returns."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
            self._supervisor = None
        try:
            await self._prober.stop()
            pending = list(self._handling)
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
                encode(
                    {
                        "type": "init",
                        "backend": self.backend,
                        "config": self.child_config(),
                        # The daemon's level as configured now (a reload changes it for
                        # the workers started after it), not an environment variable.
                        "log_level": log.level(),
                    }
                )
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
            if self._page is not None:
                self._page.forget_learnt()
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
        alive = await self.stuck.unknown_gone()
        if alive:
            pids = ", ".join(str(p.pid) for p in alive)
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
        pid = proc.pid
        await child_output.drain(
            proc.stderr,
            STDERR_LINES_PER_LIFE,
            lambda line: self._relay(line, pid, self._ready.is_set()),
            lambda: self._log.warning("worker output suppressed", worker_pid=pid),
        )

    def _relay(self, line: str, pid: int, ready: bool) -> None:
        """Re-log a worker's structured line at its level; anything else as raw output.

        Raw output before the worker is ready is what a library prints while
        failing to load (e.g. amdsmi on a node without ROCm, every re-probe);
        the bootstrap's outcome already says it, so those lines go to debug.
        """
        event = child_output.structured(line)
        if event is not None:
            # Only known levels, and the child's keys never collide with ours
            # (review-4 L1: a colliding key raised inside the drain and killed it).
            child_output.relay_structured(
                self._log, event, {"worker_pid": pid}, replaced=("source",)
            )
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
        self._prober.schedule(fault)

    async def _diagnose(
        self,
        proc: asyncio.subprocess.Process,
        reason: str,
        *,
        dump: bool = True,
        min_held: float = 0.0,
    ) -> Fault | None:
        """The device a fault is due to, isolated (see Isolation.diagnose); None if none."""
        return await self.isolation.diagnose(
            proc, self._page, self._dump, reason, dump=dump, min_held=min_held
        )

    def child_config(self) -> dict[str, Any]:
        """The backend config a new worker gets: isolated devices skipped."""
        return self.isolation.skipping(self.config)

    # -- probes of isolated devices (exporter.workers.probes drives these) --

    def probe_runner(self, indices: list[int]) -> WorkerRunner:
        """A runner for these devices alone, with this one's config (events included).

        Its worker must do all a worker does; it isolates nothing itself.
        """
        return WorkerRunner(
            self.name,
            self.backend,
            {**self.config, ISOLATION_KEY: {"only": indices}},
            bootstrap_timeout=self.bootstrap_timeout,
            env=self.env,
            python=self.python,
            isolate=False,
            log_context={"probe_of": indices},
        )

    async def attempt(self) -> bool:
        """Start one worker, without a supervisor (a probe); True when it is ready."""
        return await self._launch()

    def served(self) -> list[object]:
        """The library indices of the devices the ready worker's inventory lists."""
        devices = self.state.inventory.get("devices")
        if not isinstance(devices, list):
            return []
        return [d.get("index") for d in devices if isinstance(d, dict)]

    async def discard(self) -> list[asyncio.subprocess.Process]:
        """End the worker started by attempt(); the killed processes that are still alive."""
        try:
            await self._terminate(graceful=True)
            return [p for p in self.stuck.unknown if p.returncode is None]
        finally:
            self._close_files()

    async def take_back(self, members: list[Fault]) -> None:
        """Release these isolated devices (their probe answered) and restart with them."""
        indices = [m.index for m in members]
        async with self._call_lock:  # not in the middle of a poll
            # Released only now: a poll never sees it neither isolated nor served.
            self.isolation.release(members)
            await self.restart("device_recovered", f"device {indices} answers again")

    def stuck_processes(self) -> int:
        """Killed workers (and probes) that have not exited yet (read-only: /status calls it)."""
        # One process may be stuck for every partition of its GPU: counted once.
        return self.stuck.count()

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
                    if fault is not None and fault.index not in self.stuck.on_device:
                        # Stuck on the isolated device, which no new worker touches.
                        self.stuck.left_on(proc, self.isolation.unit(fault.unit))
                        self._log.error(
                            "killed worker stuck", device=fault.index, worker_pid=proc.pid
                        )
                    else:
                        self.stuck.unknown.append(proc)
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
            self.isolation.answered()  # whatever was slow last time moved on
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
            "isolated_devices": self.isolation.status(),
        }
