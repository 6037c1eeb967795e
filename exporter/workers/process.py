"""One worker process: its shared pages, its start, its framed exchanges and its end.

What a worker is, as opposed to what the runner (:mod:`exporter.workers.runner`) decides
about it: the two pages it shares with the daemon (:class:`Pages`, kept across its lives),
the process started by the one child supervisor (:mod:`exporter.workers.supervisor`) with
its stderr relayed, a frame sent and the answer read under a deadline
(:meth:`WorkerProcess.exchange`), its exit watched, and its end within a bound.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

from exporter import log
from exporter.errors import WorkerError
from exporter.workers import crumb, prestart, stackdump
from exporter.workers.protocol import ProtocolError, encode, read_frame
from exporter.workers.supervisor import Relay, close_transport, end, signal_group, spawn

STOP_GRACE_SECONDS = 1.0
STDERR_LINES_PER_LIFE = 200
# The longest line a reader of the worker's streams accepts (its stderr; frames are
# read by length).
STREAM_LIMIT = 2**20


class Pages:
    """The breadcrumb page and the stack-dump file a runner's workers share with it.

    Created for the first worker and kept for the next ones (a new worker starts on
    cleared pages), so what one that hung had learnt can still be read.
    """

    def __init__(self) -> None:
        self.page: crumb.Page | None = None
        self.dump: stackdump.DumpFile | None = None
        # What earlier workers learnt of each device before any inventory (see learnt()).
        self._learnt: dict[int, str] = {}
        # The worker started on these pages at the daemon's start, until a start adopts it.
        self.early: prestart.Prestarted | None = None

    def remember(self) -> None:
        """Keep what the last worker's page learnt, before a new worker clears it."""
        if self.page is not None:
            self._learnt.update(self.page.learnt())

    def forget(self) -> None:
        """A worker answered with its inventory, which says it all now."""
        self._learnt.clear()
        if self.page is not None:
            self.page.forget_learnt()

    def learnt(self, *, current: bool) -> dict[int, str]:
        """Identity text by library index that workers learnt before any inventory.

        What earlier workers learnt and, when ``current``, what the worker starting now
        has learnt so far.
        """
        if not current or self.page is None:
            return dict(self._learnt)
        return {**self._learnt, **self.page.learnt()}

    def take(self, early: prestart.Prestarted | None) -> None:
        """Use an early worker's pages from now on; the next start adopts the worker."""
        if early is not None:
            self.close()
            self.page, self.dump, self.early = early.page, early.dump, early

    def open(self) -> tuple[crumb.Page, stackdump.DumpFile]:
        """Both pages, created if they are not yet (OSError: no memfd, an fd limit)."""
        if self.page is None or self.dump is None:
            self.close()
            try:
                self.page, self.dump = crumb.Page(), stackdump.DumpFile()
            except OSError:
                self.close()
                raise
        return self.page, self.dump

    def close(self) -> None:
        """Release both (the runner stops, or a probe's worker is discarded)."""
        if self.early is not None:  # stopped before any start adopted it
            self.early.end_process()
            self.early = None
        if self.page is not None:
            self.page.close()
            self.page = None
        if self.dump is not None:
            self.dump.close()
            self.dump = None


class WorkerProcess:
    """One live worker process, started by :meth:`start` on cleared pages."""

    def __init__(self, proc: asyncio.subprocess.Process, relay: asyncio.Task[None]) -> None:
        self.proc = proc
        self._tasks: list[asyncio.Task[Any]] = [relay]

    @classmethod
    async def start(
        cls,
        python: str,
        env: Mapping[str, str] | None,
        pages: Pages,
        context: Mapping[str, Any],
        quiet: Callable[[], bool],
    ) -> WorkerProcess:
        """``python -m exporter.workers`` with the pages passed; OSError if it cannot start.

        The worker started at the daemon's start on ``pages`` (:meth:`Pages.take`) is
        adopted instead of spawning one (spawned after all if it cannot be adopted).

        Its stderr is relayed on a logger bound with ``context`` (the runner's): structured
        lines at their level, raw output at debug while ``quiet()`` (see supervisor.Relay).
        """
        page, dump = pages.open()
        page.reset()
        dump.clear()
        early, pages.early = pages.early, None
        if early is not None:
            # Started with these pages at the daemon's start (exporter.workers.prestart).
            try:
                proc = await prestart.adopt(early, STREAM_LIMIT)
            except OSError:
                early.end_process()
                early = None
            except BaseException:
                # Cancelled (a stop, a reload) or failed otherwise mid-adoption: no one
                # owns the early worker now, so it ends here rather than run orphaned.
                early.end_process()
                raise
        if early is None:
            full = dict(os.environ if env is None else env)
            full.update(page.env())
            full.update(dump.env())
            # The worker sets its death signal itself, first thing (workers/child.py).
            proc = await spawn(
                [python, "-m", "exporter.workers"],
                guard=False,
                stdin=True,
                env=full,
                pass_fds=(page.fd, dump.fd),
                limit=STREAM_LIMIT,
            )
        relay = Relay(
            log.get(**context),
            "worker",
            pid_key="worker_pid",
            per_life=STDERR_LINES_PER_LIFE,
            structured=True,
            context=context,
            quiet=quiet,
        )
        return cls(proc, asyncio.create_task(relay.drain(proc)))

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    async def exchange(
        self, message: dict[str, Any], timeout: float, *, send_timeout: float | None
    ) -> dict[str, Any]:
        """Send one frame and read the next; each step under its deadline.

        Raises what the streams raise: asyncio.TimeoutError, EOFError, ConnectionError,
        BrokenPipeError, ProtocolError.
        """
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(encode(message))
        await asyncio.wait_for(proc.stdin.drain(), timeout=send_timeout)
        return await asyncio.wait_for(read_frame(proc.stdout), timeout=timeout)

    async def call(
        self,
        call_id: int,
        op: str,
        args: Mapping[str, Any],
        timeout: float,
        answered: Callable[[], None],
    ) -> Any:
        """The result of one request; ``answered()`` once the reply to it is in.

        WorkerError for the backend's own fault reply (the worker lives on);
        ProtocolError for a reply out of turn or of another type (it must be killed);
        else what :meth:`exchange` raises.
        """
        request = {"type": "call", "id": call_id, "op": op, "args": dict(args)}
        reply = await self.exchange(request, timeout, send_timeout=timeout)
        if reply.get("id") != call_id:
            raise ProtocolError(f"reply id {reply.get('id')!r} does not match request {call_id}")
        answered()
        if reply.get("type") == "fault":
            raise WorkerError(str(reply.get("reason") or "fault"), str(reply.get("detail") or ""))
        if reply.get("type") != "result" or "result" not in reply:
            raise ProtocolError(f"unexpected reply of type {reply.get('type')!r}")
        return reply["result"]

    async def bootstrap(
        self, backend: str, config: Mapping[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Send the init frame and read the worker's first frame (``ready`` or ``error``).

        Raises what :meth:`exchange` raises; ``timeout`` bounds the wait for the answer.
        """
        init = {
            "type": "init",
            "backend": backend,
            "config": dict(config),
            # The daemon's level as configured now (a reload changes it for the
            # workers started after it), not an environment variable.
            "log_level": log.level(),
        }
        return await self.exchange(init, timeout, send_timeout=None)

    def watch(self, exited: Callable[[int], None]) -> None:
        """Call ``exited(status)`` when the process exits (unless ended first)."""

        async def wait() -> None:
            exited(await self.proc.wait())

        self._tasks.append(asyncio.create_task(wait()))

    async def end(self, *, graceful: bool) -> None:
        """End it within a bound (supervisor.end): graceful closes its stdin first.

        End of input asks the worker to release the library and exit. Whether it died
        is in ``proc.returncode``: one that has not is the caller's to count as stuck.
        """
        stdin = self.proc.stdin
        ask = stdin.close if graceful and stdin is not None else None
        await end(self.proc, ask=ask, grace=STOP_GRACE_SECONDS)

    def kill(self) -> None:
        """SIGKILL to its group now (synchronous: for use while being cancelled)."""
        if self.proc.returncode is None:
            signal_group(self.proc)

    def close(self) -> None:
        """Stop relaying and watching, and close the pipes (also when it did not die)."""
        self.kill()
        close_transport(self.proc)
        for task in self._tasks:
            task.cancel()
        self._tasks = []
