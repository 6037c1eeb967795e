"""Killed workers that have not died (uninterruptible sleep in a driver).

SIGKILL cannot be ignored, but a process inside a driver call dies only when
the call returns. Such a process is left behind rather than waited for: when
the device it was stuck on is known (isolated), no new worker touches that
device, so it holds nothing back, and no probe of the device runs while it
lives (at most one such process per device); when the device is not known it
may be stuck on any of them, so it holds back the next worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.workers.isolation import Fault, Isolation

# How long a killed worker whose device is unknown gets to die before the next
# worker is held back for it.
GONE_WAIT_SECONDS = 1.0


class StuckProcesses:
    """The processes one runner killed that are still alive."""

    def __init__(self, log: Any) -> None:
        self._log = log
        # By the device (library index) each was stuck on; one process may be stuck
        # for every partition of its GPU.
        self.on_device: dict[int, asyncio.subprocess.Process] = {}
        # Killed while on no known device: may be stuck on any.
        self.unknown: list[asyncio.subprocess.Process] = []

    def adopt(self, old: StuckProcesses) -> None:
        """Keep ``old``'s processes stuck on devices (a reload): probes must not join them."""
        self.on_device.update((i, p) for i, p in old.on_device.items() if p.returncode is None)

    def left_on(self, proc: asyncio.subprocess.Process, members: Iterable[Fault]) -> None:
        """``proc`` is stuck on these isolated devices (the logical devices of one GPU)."""
        for member in members:
            self.on_device[member.index] = proc
            member.stuck_pid = proc.pid

    def holds(self, index: int, faults: Mapping[int, Fault]) -> bool:
        """Whether a process is still stuck on device ``index`` (forgotten once it died)."""
        proc = self.on_device.get(index)
        if proc is not None and proc.returncode is not None:
            self.on_device.pop(index, None)
            fault = faults.get(index)
            if fault is not None:
                fault.stuck_pid = None
            self._log.info("stuck worker exited", device=index, worker_pid=proc.pid)
            proc = None
        return proc is not None

    def count(self) -> int:
        """How many are alive (read-only: /status calls it)."""
        stuck = {id(p): p for p in [*self.on_device.values(), *self.unknown]}
        return sum(1 for p in stuck.values() if p.returncode is None)

    async def unknown_gone(self) -> list[asyncio.subprocess.Process]:
        """Wait a little for those on no known device to die; those still alive."""
        loop = asyncio.get_running_loop()
        end = loop.time() + GONE_WAIT_SECONDS
        while any(p.returncode is None for p in self.unknown) and loop.time() < end:
            await asyncio.sleep(0.05)
        self.unknown = [p for p in self.unknown if p.returncode is None]
        return self.unknown

    async def holding_back(self) -> str | None:
        """Why no new worker may start yet (a killed one has not died), or None.

        A process in uninterruptible sleep inside a driver ignores SIGKILL until the
        call returns; starting another one each backoff would pile them up. Those stuck
        on an isolated device do not count: the new worker will not touch that device.
        One whose culprit is unknown might be stuck on any of them, so it holds back.
        """
        alive = await self.unknown_gone()
        if not alive:
            return None
        pids = ", ".join(str(p.pid) for p in alive)
        return (
            f"killed worker {pids} has not exited (stuck in the driver?); "
            "no new worker until it does"
        )

    def killed(
        self, proc: asyncio.subprocess.Process, fault: Fault | None, isolation: Isolation
    ) -> None:
        """``proc`` was killed (for ``fault``, if one) and has not died: account for it."""
        if fault is not None and fault.index not in self.on_device:
            # Stuck on the isolated device, which no new worker touches.
            self.left_on(proc, isolation.unit(fault.unit))
            self._log.error("killed worker stuck", device=fault.index, worker_pid=proc.pid)
        else:
            self.unknown.append(proc)
