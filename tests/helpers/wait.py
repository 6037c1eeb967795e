"""``eventually()``: the one way a test waits for something to become true.

A test never sleeps to let something happen: it polls a check until it holds or
a generous deadline passes (this machine is shared and slow), then fails with the
last value or error it saw. Bare sleeps stay only for negative windows ("nothing
happens for N seconds"), each with a comment saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Generous: a slow shared CI machine must never fail a correct test.
DEFAULT_TIMEOUT = 30.0


class _Last:
    """What the check last returned or raised, for the timeout message."""

    def __init__(self) -> None:
        self.value: object = None
        self.error: BaseException | None = None

    def message(self, what: str, timeout: float) -> str:
        seen = f"raised {self.error!r}" if self.error is not None else f"returned {self.value!r}"
        return f"timed out after {timeout:g}s waiting for {what}; the check last {seen}"


def _attempt(check: Callable[[], T], ignore: tuple[type[BaseException], ...], last: _Last) -> T:
    try:
        value = check()
    except ignore as exc:
        last.error = exc
        return None  # type: ignore[return-value]
    last.value, last.error = value, None
    return value


def eventually(
    check: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
    what: str = "the condition",
    ignore: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """Call ``check`` until it returns something truthy; that value.

    Exceptions of the ``ignore`` types count as "not yet". On timeout an
    AssertionError names ``what`` and the last value or error seen.
    """
    deadline = time.monotonic() + timeout
    last = _Last()
    while True:
        value = _attempt(check, ignore, last)
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(last.message(what, timeout))
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.01,
    what: str = "the condition",
    ignore: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """``eventually`` inside an event loop: waits with ``asyncio.sleep``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = _Last()
    while True:
        value = _attempt(check, ignore, last)
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(last.message(what, timeout))
        await asyncio.sleep(interval)
