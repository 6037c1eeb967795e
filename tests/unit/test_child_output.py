"""A supervised child's stderr: every line relayed up to the limit, then one 'suppressed'."""

from __future__ import annotations

import asyncio

from exporter import child_output


def drained(data: bytes, limit: int, buffer: int = 64 * 1024) -> tuple[list[str], int]:
    relayed: list[str] = []
    suppressed = []

    async def go() -> None:
        stream = asyncio.StreamReader(limit=buffer)
        stream.feed_data(data)
        stream.feed_eof()
        await child_output.drain(stream, limit, relayed.append, lambda: suppressed.append(1))

    asyncio.run(go())
    return relayed, len(suppressed)


def test_lines_up_to_the_limit_then_suppressed_once():
    data = b"".join(b"line %d \r\n" % i for i in range(10))
    assert drained(data, 3) == (["line 0", "line 1", "line 2"], 1)
    assert drained(data, 10) == ([f"line {i}" for i in range(10)], 0)


def test_a_line_longer_than_the_buffer_is_skipped_and_the_next_kept():
    relayed, suppressed = drained(b"x" * 200 + b"\nnext \xff\n", 5, buffer=64)
    assert relayed[-1] == "next \ufffd" and suppressed == 0
    assert all(len(line) <= 64 for line in relayed)


def test_a_relay_that_raises_does_not_end_the_drain():
    seen: list[str] = []

    def relay(line: str) -> None:
        seen.append(line)
        if line == "bad":
            raise TypeError("a child's line the relay could not take")

    async def go() -> None:
        stream = asyncio.StreamReader()
        stream.feed_data(b"bad\ngood\n")
        stream.feed_eof()
        await child_output.drain(stream, 10, relay, lambda: None)

    asyncio.run(go())
    assert seen == ["bad", "good"]


def test_a_worker_line_with_our_key_or_an_unknown_level_is_relayed():
    from structlog.testing import capture_logs

    from exporter import log
    from exporter.workers.supervisor import Relay

    context = {"source": "testdev"}
    relay = Relay(
        log.get(**context),
        "worker",
        pid_key="worker_pid",
        per_life=10,
        structured=True,
        context=context,
    )
    with capture_logs() as logs:
        relay.relay('{"event": "hi", "level": "bind", "worker_pid": 1, "x": 2}', 42)
        relay.relay('{"event": "warned", "level": "WARNING", "source": "spoof"}', 42)
        relay.relay('{"event": "lower", "level": "msg"}', 42)
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("hi", "info"),
        ("warned", "warning"),
        ("lower", "info"),
    ]
    # Ours stay ours; the child's colliding keys are kept under a prefix.
    assert logs[0]["worker_pid"] == 42 and logs[0]["child_worker_pid"] == 1
    assert logs[0]["x"] == 2
    # The worker's own "source" is replaced by ours, never taken as it says.
    assert logs[1]["source"] == "testdev" and "child_source" not in logs[1]
