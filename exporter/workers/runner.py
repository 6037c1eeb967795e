"""Parent side of a worker process: bootstrap, calls with deadlines, kill, reap, respawn.

A supervisor task owns the worker's life. It starts the worker (a
:class:`~exporter.workers.process.WorkerProcess`, run the way every child is:
:mod:`exporter.workers.supervisor`), waits (with a deadline) for the single ``ready``
or ``error`` frame, then waits for the worker to die or be killed, and starts it again
after a backoff. Calls are request/response under a deadline; a missed deadline, a
crash or a malformed reply kills the whole process group and reaps it (within a bound)
before anything else happens, so the number of workers never grows and no zombie
survives. What callers see of it is :mod:`exporter.workers.readiness`.

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
import sys
import time
from collections.abc import Mapping
from typing import Any

from exporter import log
from exporter.backend_api.crumb import ISOLATION_KEY
from exporter.errors import UNAVAILABLE_REPROBE_SECONDS, WorkerError
from exporter.workers import prestart
from exporter.workers.isolation import DUMP_WAIT_SECONDS, DeviceFault, Fault, Isolation, Probe
from exporter.workers.probes import Prober
from exporter.workers.process import Pages, WorkerProcess
from exporter.workers.protocol import ProtocolError
from exporter.workers.readiness import Readiness, WorkerState
from exporter.workers.stuck import StuckProcesses
from exporter.workers.supervisor import REAP_WAIT_SECONDS, Backoff, close_transport

# What naming and killing a stuck worker may take after its deadline (the dump
# wait and the reap wait): callers leave this much of their own deadline.
FAULT_BUDGET_SECONDS = DUMP_WAIT_SECONDS + REAP_WAIT_SECONDS


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
        self.config = dict(config)
        self.bootstrap_timeout = bootstrap_timeout
        self.env = dict(env) if env is not None else None
        self.python = python
        self._log_context = {"source": name, **(log_context or {})}
        self._log = log.get(**self._log_context)
        # The re-probe period read at each use: this module's name for it is the one in force.
        self.readiness = Readiness(self._log, lambda: UNAVAILABLE_REPROBE_SECONDS)
        self._worker: WorkerProcess | None = None
        self._dead = asyncio.Event()
        self._wake = asyncio.Event()
        self._call_lock = asyncio.Lock()
        self._next_id = 0
        self._backoff = Backoff()
        self._ended_badly = False
        self._killed_for: tuple[str, str] | None = None
        self._restart_now = False
        self._supervisor: asyncio.Task[None] | None = None
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
        self._pages = Pages()
        # Held while a worker starts, so a restart never lands in the middle of one.
        self._switch = asyncio.Lock()
        # Timeout handling that outlives a cancelled caller (see call()).
        self._handling: set[asyncio.Task[Any]] = set()

    @property
    def state(self) -> WorkerState:
        """What /status shows about the worker (see exporter.workers.readiness)."""
        return self.readiness.state

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
            # Claimed now, not when the supervisor runs: the daemon ends an early worker
            # no runner claimed once its sources have started.
            self._pages.take(prestart.take(self.python, self.env))
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
            self._pages.close()

    @property
    def is_ready(self) -> bool:
        """Whether a worker is ready to be called now."""
        return self.readiness.ready.is_set()

    @property
    def pid(self) -> int | None:
        """PID of the live worker, if any."""
        worker = self._worker
        return worker.pid if worker is not None and worker.proc.returncode is None else None

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
            self.readiness.attempt_done.clear()
            self._restart_now = True
            # Asked for, not a failure, but a new process all the same: the next start
            # counts as a restart (once, even if the last worker also ended badly).
            self._ended_badly = True
            await self._terminate(graceful=True)
            self.state.state = "starting"
            self._wake.set()  # in case the supervisor sits in a backoff

    async def _supervise(self) -> None:
        while True:
            self.readiness.attempt_done.clear()
            try:
                async with self._switch:
                    ok = await self._launch()
            finally:
                self.readiness.attempt_done.set()
            if ok:
                self._backoff.good()
                await self._dead.wait()
                if self._restart_now:
                    self._restart_now = False
                    continue
                delay = self._backoff.bad()
            elif self._restart_now:
                # A device was isolated at bootstrap: the others are not to blame.
                self._restart_now = False
                continue
            elif self.state.state == "unavailable":
                # Probed again when a poll asks (see ready()), so the scheduler's
                # re-probe cadence is the only one.
                delay = None
            else:
                delay = self._backoff.bad()
            if self.state.state != "unavailable":
                self.state.state = "backoff"
            self.state.next_start = time.time() + delay if delay is not None else None
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self.state.next_start = None

    async def _launch(self) -> bool:
        """Start a worker and wait for its first frame. True when it is ready."""
        self.readiness.ready.clear()
        self._dead.clear()
        self._killed_for = None
        self._restart_now = False
        self.readiness.probed_at = time.monotonic()
        held_back = await self.stuck.holding_back()
        if held_back is not None:
            self.readiness.fail("worker_unkillable", held_back)
            return False
        if self._ended_badly:
            # The previous worker was killed or died: this start is a restart.
            self.state.restarts += 1
            self._ended_badly = False
        self.state.state = "starting"
        try:
            self._pages.open()
        except OSError as exc:  # no memfd (fd limit, sandbox): no worker either
            self.readiness.fail("spawn_failed", f"cannot create the worker's shared pages: {exc}")
            return False
        if self.isolate and not self.state.inventory:
            self._pages.remember()
        try:
            worker = await WorkerProcess.start(
                self.python, self.env, self._pages, self._log_context, self.readiness.unready
            )
        except OSError as exc:
            self.readiness.fail("spawn_failed", f"cannot start worker: {exc}")
            return False
        self._worker = worker
        self.state.pid = worker.pid
        return await self._bootstrap(worker)

    async def _bootstrap(self, worker: WorkerProcess) -> bool:
        """Send the worker its init frame and take its first; True when it is ready."""
        proc, timeout = worker.proc, self.bootstrap_timeout
        try:
            first = await worker.bootstrap(self.backend, self.child_config(), timeout)
        except asyncio.TimeoutError:
            # A start slow over many devices is not the last one's fault: blame a device
            # only if it held the worker for a quarter of the deadline.
            quarter = timeout / 4
            fault = await self.isolation.diagnose(proc, self._pages, "hung", min_held=quarter)
            if fault is not None:
                await self._kill_isolating(fault, f"while the worker started ({fault.describe()})")
                return False
            await self._kill("bootstrap_timeout", f"no answer from the worker within {timeout:g}s")
            return False
        except (EOFError, ProtocolError, ConnectionError, OSError) as exc:
            fault = await self.isolation.diagnose(proc, self._pages, "crashed", dump=False)
            if fault is not None:
                await self._kill_isolating(fault, f"while the worker started: {exc}")
                return False
            await self._kill("bootstrap_failed", f"worker failed during bootstrap: {exc}")
            return False
        kind = first.get("type")
        if kind == "ready" and isinstance(first.get("inventory"), dict):
            self._pages.forget()
            worker.watch(lambda code: self._exited(worker, code))
            self.readiness.served(first["inventory"], proc.pid)
            return True
        if kind == "error":
            await self._terminate(graceful=True)
            # A failed bootstrap ends a worker: the next start is a restart (a library
            # that is not here is no failure).
            self._ended_badly = not self.readiness.refused(first)
            return False
        await self._kill("protocol_error", f"unexpected first frame of type {kind!r}")
        return False

    def _exited(self, worker: WorkerProcess, code: int) -> None:
        """The ready worker exited by itself (or of a kill whose caller is gone)."""
        if self._worker is worker and not self._dead.is_set():
            how = f"signal {-code}" if code < 0 else f"status {code}"
            self.readiness.ready.clear()
            if self._killed_for is not None:
                self.readiness.fail(*self._killed_for)
            else:
                self.readiness.fail("crashed", f"worker exited with {how}")
            self._ended_badly = True
            self._worker = None
            self.state.pid = None
            close_transport(worker.proc)
            self._dead.set()

    async def _kill(self, reason: str, detail: str, fault: Fault | None = None) -> None:
        """Kill the worker's process group, reap it, and record why."""
        self.readiness.fail(reason, detail)
        self._ended_badly = True
        await self._terminate(graceful=False, fault=fault)

    async def _kill_isolating(self, fault: Fault, detail: str) -> None:
        """Kill the worker for one device's fault and start a new one at once without it."""
        self._restart_now = True
        await self._kill(fault.reason, detail, fault)
        self._wake.set()  # the exit watcher may have put the supervisor in a backoff
        self._prober.schedule(fault)

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
        return self.readiness.indices()

    async def discard(self) -> list[asyncio.subprocess.Process]:
        """End the worker started by attempt(); the killed processes that are still alive."""
        try:
            await self._terminate(graceful=True)
            return [p for p in self.stuck.unknown if p.returncode is None]
        finally:
            self._pages.close()

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
        worker, self._worker = self._worker, None
        self.readiness.ready.clear()
        try:
            if worker is not None:
                await worker.end(graceful=graceful)
        finally:
            # Also when cancelled mid-way (a daemon shutdown during a kill): the
            # process has had SIGKILL, asyncio's child watcher reaps it, and the
            # pipes are closed here rather than by the garbage collector.
            if worker is not None:
                if worker.proc.returncode is None:
                    self.stuck.killed(worker.proc, fault, self.isolation)
                worker.close()
            self.state.pid = None
            self._dead.set()

    # -- requests ----------------------------------------------------------

    async def ready(self, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` for a ready worker; its inventory, or an error.

        See :meth:`exporter.workers.readiness.Readiness.wait`: a library that is not
        there is looked for again (a new start) once its re-probe clock runs out.
        """
        return await self.readiness.wait(timeout, self.request_restart)

    def learnt(self) -> dict[int, str]:
        """Identity text of each device the workers identified before any inventory.

        By library index, from the shared page: what a bootstrap that has not
        answered yet (hung on one device, say) has learnt so far, with what
        earlier attempts learnt. Empty once a worker has answered (its inventory
        says it all) and in probes.
        """
        if not self.isolate:
            return {}
        return self._pages.learnt(current=not self.state.inventory)

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the current start attempt to end, however it ends."""
        await self.readiness.settled(timeout)

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
            if self._worker is None or not self.readiness.ready.is_set():
                await self.ready(0)
            worker = self._worker
            assert worker is not None
            proc = worker.proc
            self._next_id += 1
            call_id = self._next_id
            try:
                return await worker.call(call_id, op, args, timeout, self.isolation.answered)
            except asyncio.TimeoutError:
                # No one may talk to this worker any more; the kill is shielded, so a
                # caller giving up meanwhile leaves neither a half-killed worker nor
                # an unrecorded culprit (stop() waits for it).
                self.readiness.ready.clear()
                blame = timeout / 2 if blame_after is None else blame_after
                handled = asyncio.ensure_future(self._after_timeout(proc, op, timeout, blame))
                self._handling.add(handled)
                handled.add_done_callback(self._handling.discard)
                raise await asyncio.shield(handled) from None
            except (EOFError, ConnectionError, BrokenPipeError) as exc:
                fault = await self.isolation.diagnose(proc, self._pages, "crashed", dump=False)
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
                # A synchronous SIGKILL while being cancelled; the exit watcher reaps.
                self._killed_for = ("timeout", f"{op} was abandoned by its caller (deadline)")
                worker.kill()
                raise

    async def _after_timeout(
        self, proc: asyncio.subprocess.Process, op: str, timeout: float, blame_after: float
    ) -> WorkerError:
        """Name and isolate the device a missed deadline is due to, or kill the whole worker."""
        fault = await self.isolation.diagnose(proc, self._pages, "hung", min_held=blame_after)
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
        return self.readiness.status(self.pid, self.stuck_processes(), self.isolation.status())
