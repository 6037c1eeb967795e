"""Log a state once when it is entered, and again at most hourly while it lasts.

A source that stays unavailable (no such device on this node) or a worker that
keeps failing the same way would otherwise write the same line on every probe,
forever. A new state (another reason or detail) is logged at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

REMINDER_SECONDS = 3600.0


class StateLog:
    """Remembers, per key, the last state logged and when."""

    def __init__(
        self,
        reminder: float = REMINDER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reminder = reminder
        self._clock = clock
        self._last: dict[str, tuple[Any, float]] = {}

    def due(self, key: str, state: Any) -> bool:
        """True when ``state`` is new for ``key``, or was last logged a reminder period ago.

        A True answer counts as logged: the caller logs the line.
        """
        now = self._clock()
        last = self._last.get(key)
        if last is not None and last[0] == state and now - last[1] < self.reminder:
            return False
        self._last[key] = (state, now)
        return True

    def forget(self, key: str) -> None:
        """The state ended (the source recovered): its next failure is news again."""
        self._last.pop(key, None)
