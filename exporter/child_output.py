"""A supervised child's stderr, drained line by line and bounded per life.

A device worker and neuron-monitor both write to stderr whatever their vendor code
prints. Left unread, a full pipe would block the child; read without a bound, a
child printing in a loop would flood the log. Both supervisors (the worker runner,
:mod:`exporter.backends.neuron_monitor`) drain it here, each passing how it relays a
line, and a life's lines past ``limit`` are counted once as suppressed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def drain(
    stream: asyncio.StreamReader,
    limit: int,
    relay: Callable[[str], None],
    suppressed: Callable[[], None],
) -> None:
    """Relay each line (decoded, right-stripped) until the stream ends.

    Past ``limit`` lines, ``suppressed()`` once and nothing more. A line longer than
    the stream's buffer is skipped.
    """
    lines = 0
    while True:
        try:
            raw = await stream.readline()
        except (ValueError, asyncio.LimitOverrunError):
            continue  # longer than the buffer: asyncio drops it, the next line is whole
        if not raw:
            return
        lines += 1
        if lines <= limit:
            relay(raw.decode("utf-8", "replace").rstrip())
        elif lines == limit + 1:
            suppressed()
