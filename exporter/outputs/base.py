"""What a push output is: started after the sources, flushed and stopped last."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Protocol


class Output(Protocol):
    """A push output reading the store on its own schedule (e.g. OTLP).

    On a reload, a new output whose :meth:`fingerprint` equals the running one's of
    the same name is dropped unstarted and the running one is kept, untouched; a
    replaced one is stopped first, and the new one :meth:`adopt` s it before starting.
    """

    name: str

    def fingerprint(self) -> object:
        """What it was built from: equal for two outputs that would do the same."""
        ...

    def adopt(self, old: Any) -> None:
        """Take over what the stopped ``old`` (same name) kept that a reload must not lose."""
        ...

    async def start(self) -> None:
        """Begin exporting."""
        ...

    def stop_seconds(self, deadline: float) -> float:
        """The longest ``stop(deadline)`` takes (what the caller waits for)."""
        ...

    async def stop(self, deadline: float) -> None:
        """Flush once, within ``deadline`` seconds, and release everything."""
        ...

    def status(self) -> dict[str, Any]:
        """Fields for /status."""
        ...


async def ended(thread: threading.Thread | None, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``thread`` to end; whether it did (or there was none).

    Not a blocking join: the event loop goes on (other outputs stop meanwhile). For the
    outputs whose requests run on a thread of their own: the one in flight ends at its
    own deadline, within the caller's ``stop_seconds``.
    """
    end = time.monotonic() + seconds
    while thread is not None and thread.is_alive() and time.monotonic() < end:
        await asyncio.sleep(0.02)
    return thread is None or not thread.is_alive()
