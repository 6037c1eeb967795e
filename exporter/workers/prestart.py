"""A worker process started at the daemon's first instant, for its first device runner.

A worker's start is the longest step between spawning the daemon and a ``/metrics``
holding every GPU (docs/performance.md): an interpreter and its imports, about 150 ms
before it reads its init frame, then the library's start and the devices' identity.
Started when a runner first needs it, that came after the daemon had imported and
built itself (about 240 ms in). :func:`start` spawns ``python -m exporter.workers``
before the daemon imports anything heavy, with the shared pages a runner gives its
worker, so both interpreters boot at once; the first :class:`WorkerRunner` to start
(the first enabled device source whose library is here) takes it (:func:`take`) and
adopts the process into its event loop as if it had spawned it (:func:`adopt`): the
same init frame, the same pipes, its stderr relayed, its exit watched. A worker
nobody takes (no device source runs here) is ended as soon as the sources have
started (:func:`discard`). A worker waits for its init frame before it loads any
vendor code, so one started early does nothing a late one would not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exporter.workers import crumb, stackdump

if TYPE_CHECKING:
    # Not at run time: this module is imported before the daemon imports asyncio
    # (exporter.ssl_later), so that the early worker starts first.
    import asyncio

ARGV_TAIL = ("-m", "exporter.workers")


@dataclass
class Prestarted:
    """The early worker: its process, its pages, and what it was started with."""

    proc: subprocess.Popen[bytes]
    python: str
    env: dict[str, str]  # the environment without the pages' entries
    page: crumb.Page
    dump: stackdump.DumpFile

    def end(self) -> None:
        """Kill its process group and reap it; release the pages."""
        self.end_process()
        self.page.close()
        self.dump.close()

    def end_process(self) -> None:
        """Kill its process group and reap it (the pages stay: a runner may hold them)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1.0)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


_waiting: Prestarted | None = None


def start(python: str = sys.executable) -> bool:
    """Spawn the early worker (once); False when it cannot (no memfd, no fork)."""
    global _waiting
    if _waiting is not None:
        return False
    env = dict(os.environ)
    try:
        page, dump = crumb.Page(), stackdump.DumpFile()
    except OSError:
        return False
    try:
        # As exporter.workers.supervisor.spawn starts one: its own session (the group
        # is what is killed), the pages passed, the death signal set by the worker.
        proc = subprocess.Popen(
            [python, *ARGV_TAIL],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**env, **page.env(), **dump.env()},
            pass_fds=(page.fd, dump.fd),
        )
    except OSError:
        page.close()
        dump.close()
        return False
    _waiting = Prestarted(proc, python, env, page, dump)
    return True


def take(python: str, env: Mapping[str, str] | None) -> Prestarted | None:
    """The early worker, for a runner that would start the same one; else None.

    The same interpreter and the environment it would pass (the daemon's own, as it
    is now): anything else and the runner starts its own.
    """
    global _waiting
    early = _waiting
    wanted = dict(os.environ if env is None else env)
    if early is None or early.python != python or early.env != wanted:
        return None
    if early.proc.poll() is not None:  # it died (killed by hand): not worth a frame
        discard()
        return None
    _waiting = None
    return early


def discard() -> None:
    """End the early worker if no runner took it."""
    global _waiting
    early, _waiting = _waiting, None
    if early is not None:
        early.end()


async def adopt(early: Prestarted, limit: int) -> asyncio.subprocess.Process:
    """The early worker as an asyncio process of the running loop (OSError if it cannot).

    Its pipes become the loop's streams (``limit``: the longest line a reader accepts)
    and its exit is watched through a pidfd, as asyncio watches a child it spawned.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    proc = early.proc
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    pidfd = os.pidfd_open(proc.pid)
    transport = _AdoptedTransport(proc, pidfd, loop)
    try:
        stdout = asyncio.StreamReader(limit=limit, loop=loop)
        stderr = asyncio.StreamReader(limit=limit, loop=loop)
        for stream, reader in ((proc.stdout, stdout), (proc.stderr, stderr)):
            reading = asyncio.StreamReaderProtocol(reader, loop=loop)
            pipe, _ = await loop.connect_read_pipe(lambda p=reading: p, stream)  # type: ignore[misc]
            transport.pipes.append(pipe)
        protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop)
        writing, _ = await loop.connect_write_pipe(lambda: protocol, proc.stdin)
        transport.pipes.append(writing)
        stdin = asyncio.StreamWriter(writing, protocol, None, loop)
    except BaseException:
        # The caller ends the process (WorkerProcess.start): nothing will wait on it here.
        transport.close()
        transport.stop_watching()
        raise
    adopted = asyncio.subprocess.Process(transport, _Streams(stdin, stdout, stderr), loop)  # type: ignore[arg-type]
    return adopted


class _Streams:
    """What asyncio.subprocess.Process reads of its protocol: the three streams."""

    def __init__(
        self,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
    ) -> None:
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr


class _AdoptedTransport:
    """What asyncio.subprocess.Process asks of its transport, for a Popen it did not spawn."""

    def __init__(
        self, proc: subprocess.Popen[bytes], pidfd: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._proc = proc
        self._pidfd: int | None = pidfd
        self._loop = loop
        self._exited = loop.create_future()
        self.pipes: list[asyncio.BaseTransport] = []
        loop.add_reader(pidfd, self._reap)

    def _reap(self) -> None:
        # Readable: the process has exited, so this wait does not block.
        self._proc.wait()
        self.stop_watching()
        if not self._exited.done():
            self._exited.set_result(self._proc.returncode)

    def stop_watching(self) -> None:
        """Stop watching for the exit and close the pidfd (once; idempotent)."""
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def get_pid(self) -> int:
        """The process id."""
        return self._proc.pid

    def get_returncode(self) -> int | None:
        """Its exit status once reaped, else None."""
        return self._proc.returncode

    async def _wait(self) -> int:
        """Its exit status, once it has exited (asyncio.subprocess.Process.wait)."""
        import asyncio

        code: int = await asyncio.shield(self._exited)
        return code

    def send_signal(self, sig: int) -> None:
        """Signal the process (gone already: nothing)."""
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def is_closing(self) -> bool:
        """Whether :meth:`close` ran."""
        return not self.pipes and self._pidfd is None

    def close(self) -> None:
        """Close the pipes on this loop; the exit watch ends once the process is reaped.

        A process that has exited already is reaped here, so its pidfd is closed now,
        not on a loop iteration that may never come (the loop closing next).
        """
        for pipe in self.pipes:
            pipe.close()
        self.pipes = []
        if self._pidfd is not None and self._proc.poll() is not None:
            self._reap()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """Nothing extra."""
        return default
