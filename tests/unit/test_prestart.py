"""The worker started at the daemon's start, taken and adopted by a runner (workers/prestart)."""

from __future__ import annotations

import asyncio
import errno
import os
import sys

import pytest

from exporter.workers import prestart
from exporter.workers.process import Pages, WorkerProcess
from exporter.workers.protocol import encode, read_frame


def test_an_adopted_worker_answers_on_its_pipes_and_its_exit_is_seen() -> None:
    assert prestart.start()
    early = None
    try:
        assert not prestart.start()  # one at a time
        early = prestart.take(sys.executable, None)
        assert early is not None
        assert prestart.take(sys.executable, None) is None  # taken once

        async def exchange() -> tuple[dict[str, object], int]:
            proc = await prestart.adopt(early, 2**16)
            assert proc.pid == early.proc.pid and proc.stdin is not None
            assert proc.stdout is not None and proc.returncode is None
            # Not an init frame: the worker says so on its protocol pipe and exits 2.
            proc.stdin.write(encode({"type": "hello"}))
            await proc.stdin.drain()
            frame = await asyncio.wait_for(read_frame(proc.stdout), 60)
            code = await asyncio.wait_for(proc.wait(), 60)
            proc._transport.close()  # type: ignore[attr-defined]
            return frame, code

        frame, code = asyncio.run(exchange())
        assert frame["type"] == "error" and frame["reason"] == "protocol_error"
        assert code == 2 and early.proc.returncode == 2
    finally:
        prestart.discard()
        if early is not None:
            early.page.close()
            early.dump.close()


def test_a_worker_no_runner_takes_is_ended() -> None:
    assert prestart.start()
    early = prestart._waiting
    assert early is not None
    # Another interpreter, another environment: the runner starts its own.
    assert prestart.take("/usr/bin/python3-elsewhere", None) is None
    assert prestart.take(sys.executable, {"PATH": "/nowhere"}) is None
    prestart.discard()
    assert early.proc.returncode is not None
    assert prestart._waiting is None


def _taken() -> prestart.Prestarted:
    assert prestart.start()
    early = prestart.take(sys.executable, None)
    assert early is not None
    return early


def test_a_closed_transport_of_an_exited_worker_closes_its_pidfd() -> None:
    early = _taken()
    try:

        async def adopt_and_close() -> int:
            proc = await prestart.adopt(early, 2**16)
            transport = proc._transport  # type: ignore[attr-defined]
            pidfd = transport._pidfd
            assert pidfd is not None
            early.end_process()  # exited and reaped, no loop iteration since
            transport.close()
            assert transport.is_closing()
            transport.close()  # twice: nothing more to close
            return int(pidfd)

        pidfd = asyncio.run(adopt_and_close())
        with pytest.raises(OSError) as closed:
            os.fstat(pidfd)
        assert closed.value.errno == errno.EBADF
    finally:
        early.end()


def test_a_start_cancelled_while_adopting_ends_the_early_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    early = _taken()
    pages = Pages()
    pages.take(early)

    async def never(_early: prestart.Prestarted, _limit: int) -> asyncio.subprocess.Process:
        await asyncio.Event().wait()
        raise AssertionError("not reached")

    monkeypatch.setattr(prestart, "adopt", never)

    async def cancel_start() -> None:
        task = asyncio.ensure_future(
            WorkerProcess.start(sys.executable, None, pages, {}, lambda: True)
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_start())
        assert early.proc.returncode is not None  # ended and reaped, not orphaned
        with pytest.raises(ProcessLookupError):
            os.kill(early.proc.pid, 0)
        assert pages.early is None
    finally:
        early.end_process()
        pages.close()
