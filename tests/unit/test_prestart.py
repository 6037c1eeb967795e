"""The worker started at the daemon's start, taken and adopted by a runner (workers/prestart)."""

from __future__ import annotations

import asyncio
import sys

from exporter.workers import prestart
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
