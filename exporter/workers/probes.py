"""Probes: each isolated physical device retried apart, with backoff, until it answers.

A probe is a worker of its own for the logical devices of one physical device
(a :class:`~exporter.workers.runner.WorkerRunner` restricted to them, seen here as a
:class:`ProbeWorker`, with the main worker's configuration, events included),
bootstrapped and asked the
:class:`~exporter.workers.isolation.Probe` request under the same deadlines,
then ended and reaped like any worker. It is driven through the runner's public
probe API (``attempt``, ``served``, ``call``, ``discard``). One probe per
physical device at a time, however many logical devices it has; none while a
killed process is still stuck on it. When a probe answers, the devices are
handed back (``take_back``) and the main worker restarts with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from exporter.errors import WorkerError
from exporter.workers.isolation import Fault, Isolation, Probe, probe_delay
from exporter.workers.stuck import StuckProcesses


class ProbeWorker(Protocol):
    """What a probe drives: one worker for the devices probed (a restricted WorkerRunner).

    A protocol, so that this module depends on no runner (the runner makes its probes).
    """

    async def attempt(self) -> bool:
        """Start the worker; True when it is ready."""
        ...

    def served(self) -> list[object]:
        """The library indices the ready worker's inventory lists."""
        ...

    async def call(self, op: str, args: Mapping[str, Any], timeout: float) -> Any:
        """One request under a deadline; WorkerError on any failure."""
        ...

    async def discard(self) -> list[asyncio.subprocess.Process]:
        """End the worker; the killed processes that are still alive."""
        ...


class Prober:
    """The probe loops of one runner's isolated physical devices."""

    def __init__(
        self,
        name: str,
        isolation: Isolation,
        stuck: StuckProcesses,
        *,
        spawn: Callable[[list[int]], ProbeWorker],
        take_back: Callable[[list[Fault]], Awaitable[None]],
        log: Any,
    ) -> None:
        self.name = name
        # The request a probe must answer; None: no probing (the source did not say how).
        self.request: Probe | None = None
        self._isolation = isolation
        self._stuck = stuck
        self._spawn = spawn
        self._take_back = take_back
        self._log = log
        # One loop per physical device (Fault.unit).
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._stopped = False

    def schedule(self, fault: Fault) -> None:
        """Probe the physical device of ``fault`` (unless it is being probed already)."""
        if self.request is None or self._stopped:
            return
        unit = fault.unit
        running = self._loops.get(unit)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._loop(fault), name=f"probe-{self.name}-{unit}")
        self._loops[unit] = task
        task.add_done_callback(lambda done: self._forget(unit, done))

    async def stop(self) -> None:
        """End every probe (its worker reaped) before this returns; no new one starts."""
        self._stopped = True
        loops = list(self._loops.values())
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _forget(self, unit: str, task: asyncio.Task[None]) -> None:
        if self._loops.get(unit) is task:
            del self._loops[unit]

    async def _loop(self, fault: Fault) -> None:
        """Probe one physical device with backoff until it answers; then take it back.

        Its logical devices are probed by one worker together and released together.
        """
        unit = fault.unit
        while not self._stopped:
            members = self._isolation.unit(unit)
            if not members:
                return
            lead = members[0]
            delay = probe_delay(lead.probes)
            for member in members:
                member.next_probe = time.time() + delay
            await asyncio.sleep(delay)
            members = self._isolation.unit(unit)
            if not members:
                return
            for member in members:
                member.next_probe = None
            indices = [m.index for m in members]
            # While a process is still stuck on the device a probe would only join it.
            try:
                faults = self._isolation.faults
                stuck = any([self._stuck.holds(i, faults) for i in indices])
                answered = not stuck and await self._once(members)
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:  # a bug must not end the probing of this device
                self._log.error("probe failed", devices=indices, error=repr(exc))
                answered = False
            if not answered:
                for member in members:
                    member.probes += 1
                continue
            self._log.info(
                "device answers again", devices=indices, call=lead.call, probes=lead.probes
            )
            await self._take_back(members)
            return

    async def _once(self, members: list[Fault]) -> bool:
        """One probe: a worker for this physical device alone, bootstrapped and asked."""
        assert self.request is not None
        indices = [m.index for m in members]
        probe = self._spawn(indices)
        try:
            if not await probe.attempt():
                return False
            served = probe.served()
            if served != indices:
                # A device is gone from the library's list (or another took its
                # index): nothing to take back; they stay isolated and named.
                self._log.warning("probe found no such device", devices=indices, found=served)
                return False
            await probe.call(self.request.op, self.request.args, timeout=self.request.timeout)
            return True
        except WorkerError:
            return False
        finally:
            for proc in await probe.discard():
                self._stuck.left_on(proc, members)
