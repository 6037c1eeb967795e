"""Device isolation: the devices a runner has isolated, and how a fault is pinned on one.

Before touching device ``i`` the worker says so in a page it shares with its
runner (:mod:`exporter.workers.crumb`). When a call or the bootstrap misses its
deadline, or the worker crashes, :meth:`Isolation.diagnose` reads the page and
asks for a stack dump (:mod:`exporter.workers.stackdump`): device ``i`` and the
call are named and the device is *isolated* (a :class:`Fault`). The unit of
isolation is the physical device: the logical devices the worker said share
one (partitions of an AMD GPU, in the page's topology) are isolated together.
What happens next (a new worker without them, a probe of each physical device)
is the runner's (:mod:`exporter.workers.runner`) and the prober's
(:mod:`exporter.workers.probes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.backend_api.crumb import ISOLATION_KEY
from exporter.errors import WorkerError
from exporter.workers import stackdump
from exporter.workers.process import Pages

# How long a stuck worker gets to write its stack dump after SIGUSR1.
DUMP_WAIT_SECONDS = 0.3
# An isolated device is probed again after 2, 4, 8, ... seconds, at most this far apart.
PROBE_BASE_SECONDS = 2.0
PROBE_CAP_SECONDS = 60.0


@dataclass
class Fault:
    """A device isolated from the worker: what it did, since when, how its probes go."""

    index: int  # the library's index of the device
    reason: str  # hung | crashed
    call: str  # the vendor call it was in, "" when the stack dump did not say
    identity: str  # what the worker had learnt of its identity (PCI bus id, uuid)
    since: float  # wall time it was isolated
    probes: int = 0  # failed probes so far
    next_probe: float | None = None  # wall time of the next probe
    stuck_pid: int | None = None  # a killed process still stuck on it
    # The physical device it belongs to ("": itself alone); its siblings share its fate.
    parent: str = ""
    # Isolated with the device named here, which it shares a physical device with.
    sibling_of: int | None = None

    @property
    def unit(self) -> str:
        """What is isolated and probed as one: the physical device."""
        return self.parent or f"#{self.index}"

    def describe(self) -> str:
        """One line for logs and /status."""
        call = self.call or "a vendor call"
        verb = "hung in" if self.reason == "hung" else "crashed the worker in"
        return f"device {self.index} {verb} {call}"


@dataclass(frozen=True)
class Probe:
    """The request a probe of an isolated device must answer to release it."""

    op: str
    args: Mapping[str, Any]
    timeout: float


class DeviceFault(WorkerError):
    """A call failed because of one device, now isolated (see the module docstring)."""

    def __init__(self, reason: str, detail: str, fault: Fault) -> None:
        super().__init__(reason, detail)
        self.fault = fault


def probe_delay(failures: int) -> float:
    """Wait before the next probe of a device after ``failures`` failed probes."""
    return float(min(PROBE_BASE_SECONDS * 2**failures, PROBE_CAP_SECONDS))


class Isolation:
    """The devices one runner has isolated, by library index, and the diagnosis."""

    def __init__(self, log: Any, *, enabled: bool = True) -> None:
        # Off in probes themselves: a probe's fault is its device's, already isolated.
        self.enabled = enabled
        self.faults: dict[int, Fault] = {}
        self._log = log
        # The device a whole-worker timeout was last on: the same one twice is blamed
        # even when earlier devices ate the time (a slow poll, then a hang late in it).
        self._suspect: int | None = None
        # Failed probes of a device when it was last released: a device isolated
        # again resumes its backoff instead of being probed every 2 s.
        self._history: dict[int, int] = {}

    def adopt(self, old: Isolation) -> None:
        """Keep what ``old`` isolated (a reload), each due for a new probe schedule."""
        for index, fault in old.faults.items():
            self.faults[index] = dataclasses.replace(fault, next_probe=None)
        self._history.update(old._history)

    def answered(self) -> None:
        """A call was answered: whatever was slow last time moved on."""
        self._suspect = None

    def unit(self, unit: str) -> list[Fault]:
        """The isolated logical devices of one physical device, by index."""
        return sorted((f for f in self.faults.values() if f.unit == unit), key=lambda f: f.index)

    def release(self, members: list[Fault]) -> None:
        """Take devices back (their probe answered); a later isolation resumes the backoff."""
        for member in members:
            self._history[member.index] = member.probes + 1
            self.faults.pop(member.index, None)

    def skipping(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with the isolated devices skipped (what a new worker gets)."""
        out = dict(config)
        if self.faults:
            rules = dict(out.get(ISOLATION_KEY) or {})
            rules["skip"] = sorted(set(rules.get("skip") or ()) | set(self.faults))
            out[ISOLATION_KEY] = rules
        return out

    async def diagnose(
        self,
        proc: asyncio.subprocess.Process,
        pages: Pages,
        reason: str,
        *,
        dump: bool = True,
        min_held: float = 0.0,
    ) -> Fault | None:
        """Which device (and call) the worker was stuck on or crashed in; isolates it.

        None when the worker was not inside a device (a system-wide call, the
        library's own start), when it had been on that device for less than
        ``min_held`` seconds (a poll slow over every device is nobody's fault),
        or, for a crash, when it was not a fatal signal in native code (an
        outside SIGKILL is not the device's doing).
        """
        page, dump_file = pages.page, pages.dump
        if not self.enabled or page is None or dump_file is None:
            return None
        seen = page.read()
        if seen.index is None or seen.index in self.faults:
            return None
        if seen.held < min_held and seen.index != self._suspect:
            self._suspect = seen.index  # blamed if the next deadline finds it there again
            return None
        self._suspect = None
        call = ""
        if dump and proc.returncode is None:
            dump_file.clear()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, stackdump.DUMP_SIGNAL)
            loop = asyncio.get_running_loop()
            end = loop.time() + DUMP_WAIT_SECONDS
            while not call and loop.time() < end:
                await asyncio.sleep(0.02)
                call = stackdump.hung_call(dump_file.read(), seen.main_thread)
        else:
            text = dump_file.read()
            # A native crash of the thread reading the device; not of another thread
            # (the event reader), and not an outside SIGKILL (no fatal dump at all).
            if not dump and not stackdump.fatal_on(text, seen.main_thread):
                return None
            call = stackdump.hung_call(text, seen.main_thread)
        parents = page.parents()
        parent = parents[seen.index] if seen.index < len(parents) else ""
        since = time.time()
        fault = Fault(seen.index, reason, call, seen.identity, since, parent=parent)
        fault.probes = self._history.get(seen.index, 0)
        self.faults[seen.index] = fault
        # Its siblings (partitions of the same GPU) go with it: each would hang in
        # turn, one deadline apiece, before the healthy GPUs are served.
        siblings = [
            i for i, p in enumerate(parents) if parent and p == parent and i not in self.faults
        ]
        for i in siblings:
            self.faults[i] = Fault(
                i, reason, call, "", since, fault.probes, parent=parent, sibling_of=seen.index
            )
        self._log.error(
            "device isolated",
            device=seen.index,
            reason=reason,
            call=call or "unknown",
            identity=seen.identity,
            held_seconds=round(seen.held, 3),
            physical_device=parent or None,
            with_siblings=siblings or None,
        )
        return fault

    def status(self) -> list[dict[str, Any]]:
        """The isolated devices for /status, by index."""
        return [
            {
                "index": f.index,
                "reason": f.reason,
                "call": f.call,
                "identity": f.identity,
                "since": f.since,
                "failed_probes": f.probes,
                "next_probe": f.next_probe,
                "stuck_pid": f.stuck_pid,
                "physical_device": f.parent,
                "isolated_with": f.sibling_of,
            }
            for f in sorted(self.faults.values(), key=lambda f: f.index)
        ]
