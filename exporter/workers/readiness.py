"""A worker as its callers see it: its state, whether it is ready, and why it is not.

The runner (:class:`exporter.workers.runner.WorkerRunner`) records here what happens to
its worker (started, ready, failed, unavailable, waiting out a backoff); a poll asks
:meth:`Readiness.wait` for the inventory, and /status reads :meth:`Readiness.status`.
The re-probe clock of a library that is not there is kept here too: the scheduler is
told when it runs out, so it is the only clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.errors import (
    UNAVAILABLE_REPROBE_SECONDS,
    SourcePending,
    SourceUnavailable,
    WorkerError,
)
from exporter.logstate import StateLog


@dataclass
class WorkerState:
    """What /status shows about a worker."""

    state: str = "stopped"  # stopped | starting | ready | backoff | unavailable
    pid: int | None = None
    restarts: int = 0
    last_reason: str = ""
    last_detail: str = ""
    next_start: float | None = None
    inventory: dict[str, Any] = field(default_factory=dict)


class Readiness:
    """One runner's worker state, its ready and attempt-ended events, its failures logged."""

    def __init__(
        self, log: Any, reprobe_seconds: Callable[[], float] = lambda: UNAVAILABLE_REPROBE_SECONDS
    ) -> None:
        self.state = WorkerState()
        self.ready = asyncio.Event()
        # Set whenever a start attempt has ended (ready, unavailable or failed).
        self.attempt_done = asyncio.Event()
        # When the library was last looked for (monotonic; see reprobe_in()).
        self.probed_at = 0.0
        # The re-probe period, read at each use (the runner's constant, which a test shortens).
        self._reprobe_seconds = reprobe_seconds
        self._log = log
        self._failures_logged = StateLog()

    def indices(self) -> list[object]:
        """The library indices of the devices the ready worker's inventory lists."""
        devices = self.state.inventory.get("devices")
        if not isinstance(devices, list):
            return []
        return [d.get("index") for d in devices if isinstance(d, dict)]

    def unready(self) -> bool:
        """No worker is ready (a worker's raw output is quiet then: see supervisor.Relay)."""
        return not self.ready.is_set()

    def fail(self, reason: str, detail: str) -> None:
        """Record why the worker is not serving; logged once per distinct failure."""
        self.state.last_reason = reason
        self.state.last_detail = detail
        # The same failure on every restart (a library that is not there) is one line,
        # then an hourly reminder; /status and the metrics carry it all along.
        if self._failures_logged.due("worker", (reason, detail)):
            self._log.warning("worker failed", reason=reason, detail=detail)

    def served(self, inventory: dict[str, Any], pid: int) -> None:
        """A worker answered its bootstrap with ``inventory``: ready to be called."""
        self.state.inventory = inventory
        self.state.state = "ready"
        self.state.last_reason = ""
        self.state.last_detail = ""
        self.ready.set()
        self._log.info("worker ready", pid=pid, restarts=self.state.restarts)
        self._failures_logged.forget("worker")

    def refused(self, first: dict[str, Any]) -> bool:
        """The worker's bootstrap answered ``error``; True when the library is not here.

        A library that is not on this machine is a normal state, probed again later
        (``unavailable``); any other error is a failure.
        """
        reason = str(first.get("reason") or "bootstrap_failed")
        detail = str(first.get("detail") or reason)
        if first.get("kind") != "unavailable":
            self.fail(reason, detail)
            return False
        self.state.state = "unavailable"
        self.state.last_reason, self.state.last_detail = reason, detail
        return True

    def reprobe_in(self) -> float:
        """Seconds until the next probe of an unavailable library is due."""
        return self.probed_at + self._reprobe_seconds() - time.monotonic()

    def unavailable(self) -> SourceUnavailable:
        """The error a poll gets while the library is not there, with the re-probe clock."""
        return SourceUnavailable(
            self.state.last_reason, self.state.last_detail, retry_in=max(0.0, self.reprobe_in())
        )

    async def wait(self, timeout: float, restart: Callable[[], None]) -> dict[str, Any]:
        """Wait up to ``timeout`` for a ready worker; its inventory, or an error.

        SourcePending while a bootstrap is under way (bounded by its own deadline);
        SourceUnavailable when the library is missing, and when the last probe is old,
        ``restart()`` starts a new probe and this answers SourcePending.
        """
        state = self.state
        if self.ready.is_set():
            return state.inventory
        if state.state == "unavailable":
            if self.reprobe_in() <= 0:
                # Starting now, for every caller: a poll right after this one waits for
                # this probe instead of asking for another.
                self.probed_at = time.monotonic()
                self.attempt_done.clear()
                state.state = "starting"
                restart()
                raise SourcePending("probing", "looking for the library again")
            raise self.unavailable()
        if state.state in ("starting", "stopped"):
            await self.settled(timeout)
            if self.ready.is_set():
                return state.inventory
            if state.state == "unavailable":
                raise self.unavailable()
            if state.state in ("starting", "stopped"):
                raise SourcePending("starting", "the worker is still starting")
        reason = state.last_reason or "not_running"
        wait = ""
        if state.next_start is not None:
            wait = f"; restart in {max(0.0, state.next_start - time.time()):.1f}s"
        raise WorkerError(reason, (state.last_detail or "worker not running") + wait)

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the current start attempt to end, however it ends."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.attempt_done.wait(), timeout=timeout)

    def status(self, pid: int | None, stuck: int, isolated: Any) -> dict[str, Any]:
        """Fields for /status (the restart count is the store's, so it matches the metric)."""
        state = self.state
        return {
            "worker_state": state.state,
            "worker_pid": pid,
            "worker_last_error": (
                f"{state.last_reason}: {state.last_detail}" if state.last_reason else ""
            ),
            "worker_next_start": state.next_start,
            "worker_stuck_processes": stuck,
            "isolated_devices": isolated,
        }
