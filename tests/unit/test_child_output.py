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
