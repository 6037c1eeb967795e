"""Parent side of a worker process: bootstrap, calls with deadlines, kill, reap, respawn.

A supervisor task owns the worker's life. It starts the worker, waits (with a
deadline) for the single ``ready`` or ``error`` frame, then waits for the worker
to die or be killed, and starts it again after a backoff. Calls are
request/response under a deadline; a missed deadline, a crash or a malformed
reply kills the whole process group and reaps it before anything else happens,
so the number of workers never grows and no zombie survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.errors import SourcePending, SourceUnavailable, WorkerError
from exporter.workers.protocol import ProtocolError, encode, read_frame

RESTART_BASE_SECONDS = 1.0
RESTART_CAP_SECONDS = 60.0
UNAVAILABLE_REPROBE_SECONDS = 60.0
STDERR_LINES_PER_LIFE = 200
STOP_GRACE_SECONDS = 1.0


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
    ) -> None:
        self.name = name
        self.backend = backend
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

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        """Start the supervisor (which starts the worker)."""
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(), name=f"worker-{self.name}")

    async def stop(self) -> None:
        """Stop the supervisor and the worker; the worker is reaped before this returns."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
            self._supervisor = None
        await self._terminate(graceful=True)
        self.state.state = "stopped"

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
        self._log.info("worker restart", reason=reason, detail=detail)
        # A poll waiting in ready() must wait for the new attempt, not return on
        # the finished one's event (Python 3.12+ wait_for checks it without yielding).
        self._attempt_done.clear()
        self._restart_now = True
        self.state.restarts += 1  # asked for, not a failure, but a new process all the same
        await self._terminate(graceful=True)
        self.state.state = "starting"
        self._wake.set()  # in case the supervisor sits in a backoff

    async def _supervise(self) -> None:
        while True:
            self._attempt_done.clear()
            try:
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
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "exporter.workers",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=self.env,
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
                encode({"type": "init", "backend": self.backend, "config": self.config})
            )
            await proc.stdin.drain()
            first = await asyncio.wait_for(read_frame(proc.stdout), timeout=self.bootstrap_timeout)
        except asyncio.TimeoutError:
            await self._kill(
                "bootstrap_timeout", f"no answer from the worker within {self.bootstrap_timeout:g}s"
            )
            return False
        except (EOFError, ProtocolError, ConnectionError, OSError) as exc:
            await self._kill("bootstrap_failed", f"worker failed during bootstrap: {exc}")
            return False
        kind = first.get("type")
        if kind == "ready" and isinstance(first.get("inventory"), dict):
            self.state.inventory = first["inventory"]
            self.state.state = "ready"
            self.state.last_reason = ""
            self.state.last_detail = ""
            self._aux.append(asyncio.create_task(self._watch_exit(proc)))
            self._ready.set()
            self._log.info("worker ready", pid=proc.pid, restarts=self.state.restarts)
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
            return False
        await self._kill("protocol_error", f"unexpected first frame of type {kind!r}")
        return False

    async def _previous_gone(self) -> bool:
        """False (and the reason recorded) while a killed worker has not died.

        A process in uninterruptible sleep inside a driver ignores SIGKILL until
        the call returns; starting another one each backoff would pile them up.
        """
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

    async def _kill(self, reason: str, detail: str) -> None:
        """Kill the worker's process group, reap it, and record why."""
        self._fail(reason, detail)
        self._ended_badly = True
        await self._terminate(graceful=False)

    async def _terminate(self, *, graceful: bool) -> None:
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
        # Reap, so no zombie is left; SIGKILL cannot be ignored.
        await proc.wait()
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
            if time.monotonic() - self._probed_at >= UNAVAILABLE_REPROBE_SECONDS:
                self.request_restart()
                raise SourcePending("probing", "looking for the library again")
            raise SourceUnavailable(self.state.last_reason, self.state.last_detail)
        if self.state.state in ("starting", "stopped"):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._attempt_done.wait(), timeout=timeout)
            if self._ready.is_set():
                return self.state.inventory
            if self.state.state == "unavailable":
                raise SourceUnavailable(self.state.last_reason, self.state.last_detail)
            if self.state.state in ("starting", "stopped"):
                raise SourcePending("starting", "the worker is still starting")
        reason = self.state.last_reason or "not_running"
        wait = ""
        if self.state.next_start is not None:
            wait = f"; restart in {max(0.0, self.state.next_start - time.time()):.1f}s"
        raise WorkerError(reason, (self.state.last_detail or "worker not running") + wait)

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the current start attempt to end, however it ends."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._attempt_done.wait(), timeout=timeout)

    async def call(self, op: str, args: Mapping[str, Any], timeout: float) -> Any:
        """Send one request and return its result; WorkerError on any failure.

        On a missed deadline, a crash or a malformed reply the worker is killed
        and reaped before this raises. If the caller is cancelled mid-call the
        worker is killed too, because its reply would arrive out of turn.
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
                await self._kill("timeout", f"{op} did not answer within {timeout:g}s")
                raise WorkerError("timeout", f"{op} did not answer within {timeout:g}s") from None
            except (EOFError, ConnectionError, BrokenPipeError) as exc:
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
            if reply.get("type") == "fault":
                raise WorkerError(
                    str(reply.get("reason") or "fault"), str(reply.get("detail") or "")
                )
            if reply.get("type") != "result" or "result" not in reply:
                detail = f"unexpected reply of type {reply.get('type')!r}"
                await self._kill("protocol_error", detail)
                raise WorkerError("protocol_error", detail)
            return reply["result"]

    async def invalidate(self, reason: str, detail: str) -> None:
        """Kill the worker because its answer made no sense (shape mismatch)."""
        await self._kill(reason, detail)

    def status(self) -> dict[str, Any]:
        """Fields for /status."""
        return {
            "worker_state": self.state.state,
            "worker_pid": self.pid,
            "worker_restarts": self.state.restarts,
            "worker_last_error": (
                f"{self.state.last_reason}: {self.state.last_detail}"
                if self.state.last_reason
                else ""
            ),
            "worker_next_start": self.state.next_start,
        }
