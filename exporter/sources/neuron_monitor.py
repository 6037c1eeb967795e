"""neuron-monitor as a supervised child: start, read its lines, restart it when it dies or stalls.

neuron-monitor writes one complete JSON document per line on stdout, every
period. Each line is handed to a callback as bytes, exactly once. The child is run
by the one child supervisor (:mod:`exporter.workers.supervisor`), as a worker is: in
a session of its own (so stopping it stops anything it started) and dying with the
daemon (its death signal set before neuron-monitor runs), its stderr relayed bounded,
ended within a bound (SIGTERM, a grace, SIGKILL, a bounded reap: one that does not die
is counted stuck and holds back the next start until it does), with a config file the
daemon writes. A child that exits, or prints nothing for ``STALL_PERIODS`` periods, is
ended and started again after a backoff that grows with consecutive failures (a life
that produced a line resets it).

The line limit is the configured ``max_line_bytes``, far above asyncio's 64 KiB
default: a large trn2 host's report is bigger than that. A longer line is
discarded (counted, with the reason) without losing the ones after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter import log
from exporter.workers import supervisor
from exporter.workers.stuck import StuckProcesses

# No line for this many periods is a stall.
STALL_PERIODS = 3
STDERR_LINES_PER_LIFE = 50
STOP_GRACE_SECONDS = 1.0
# The groups the daemon asks for; vcpu_usage and memory_info of the host come from the host source.
RUNTIME_GROUPS = (
    "neuroncore_counters",
    "memory_used",
    "neuron_runtime_vcpu_usage",
    "execution_stats",
)
SYSTEM_GROUPS = ("neuron_hw_counters",)


@dataclass
class MonitorState:
    """What /status shows about the child."""

    state: str = "stopped"  # stopped | running | backoff | failed
    pid: int | None = None
    restarts: int = 0
    lines: int = 0
    rejected_lines: int = 0
    last_line_at: float | None = None  # wall clock
    last_reason: str = ""
    last_detail: str = ""
    stuck_processes: int = 0  # ended children that have not died (see the module docstring)


def monitor_config(period: float) -> dict[str, Any]:
    """neuron-monitor's config: every runtime, the groups above, one period."""
    every = f"{int(period)}s"
    return {
        "period": every,
        "neuron_runtimes": [
            {"tag_filter": ".*", "metrics": [{"type": t} for t in RUNTIME_GROUPS]},
        ],
        "system_metrics": [{"type": t} for t in SYSTEM_GROUPS],
    }


class Monitor:
    """Runs ``command -c <config>`` and feeds each stdout line to ``on_line``."""

    def __init__(
        self,
        command: Sequence[str],
        period: float,
        max_line_bytes: int,
        on_line: Callable[[bytes], None],
        source: str = "neuron",
    ) -> None:
        self.command = list(command)
        self.period = period
        self.max_line_bytes = max_line_bytes
        self.on_line = on_line
        self.state = MonitorState()
        self._context = {"source": source}
        self._log = log.get(**self._context)
        self._task: asyncio.Task[None] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._dir = ""
        self._backoff = supervisor.Backoff()
        self._stuck = StuckProcesses(self._log)

    def resolve(self) -> str | None:
        """The program's path, or None when it cannot be found."""
        return shutil.which(self.command[0]) if self.command else None

    async def start(self) -> None:
        """Write the config file and start supervising."""
        self._dir = tempfile.mkdtemp(prefix="accel-exporter-neuron-")
        path = os.path.join(self._dir, "neuron-monitor.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(monitor_config(self.period), f)
        self._config_path = path
        self._task = asyncio.create_task(self._supervise(), name="neuron-monitor")

    async def stop(self) -> None:
        """Stop the child and the supervisor; remove the config file."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""
        self.state.state, self.state.pid = "stopped", None

    def note(self, reason: str, detail: str) -> None:
        """Record why the child is not giving reports (shown in /status)."""
        self.state.last_reason, self.state.last_detail = reason, detail[:500]

    async def _supervise(self) -> None:
        while True:
            produced = await self._life()
            if produced:
                self._backoff.good()
            delay = self._backoff.bad()
            self.state.restarts += 1
            self.state.state = "backoff"
            self._log.warning(
                "neuron-monitor restarting",
                reason=self.state.last_reason,
                detail=self.state.last_detail,
                delay_seconds=delay,
            )
            await asyncio.sleep(delay)

    async def _life(self) -> bool:
        """Run one child until it exits or stalls; True when it produced a line."""
        alive = await self._stuck.unknown_gone()
        self.state.stuck_processes = len(alive)
        if alive:
            pids = ", ".join(str(p.pid) for p in alive)
            self.note("unkillable", f"ended neuron-monitor {pids} has not exited; none started")
            return False
        try:
            proc = await supervisor.spawn(
                [*self.command, "-c", self._config_path],
                guard=True,
                stdin=False,
                limit=self.max_line_bytes,
            )
        except OSError as exc:
            self.note("spawn_failed", f"cannot start {self.command[0]}: {exc}")
            self.state.state = "failed"
            return False
        self._proc = proc
        self.state.state, self.state.pid = "running", proc.pid
        self._log.info("neuron-monitor started", pid=proc.pid)
        relay = supervisor.Relay(
            self._log,
            "neuron-monitor",
            pid_key="pid",
            per_life=STDERR_LINES_PER_LIFE,
            structured=False,
            context=self._context,
        )
        stderr = asyncio.create_task(relay.drain(proc))
        produced = False
        try:
            produced = await self._read(proc)
        finally:
            await self._end(proc)
            stderr.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stderr
            supervisor.close_transport(proc)
            self._proc = None
            self.state.pid = None
        return produced

    async def _read(self, proc: asyncio.subprocess.Process) -> bool:
        assert proc.stdout is not None
        produced = False
        stall = STALL_PERIODS * self.period
        while True:
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), timeout=stall)
            except asyncio.TimeoutError:
                self.note("stalled", f"no line for {stall:g}s ({STALL_PERIODS} periods)")
                return produced
            except ValueError:
                # Longer than the limit: asyncio dropped it (up to its newline, when it saw one).
                self.state.rejected_lines += 1
                self.note("line_too_long", f"a line over {self.max_line_bytes} bytes was dropped")
                self._log.warning("neuron-monitor line too long", limit=self.max_line_bytes)
                continue
            if not line:
                code = await proc.wait()
                self.note("exited", f"neuron-monitor exited with status {code}")
                return produced
            if not line.endswith(b"\n"):
                # The last bytes before the child died: not a whole document.
                continue
            produced = True
            self.state.lines += 1
            self.state.last_line_at = time.time()
            self.on_line(line)

    async def _end(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM to the child's group, a grace, SIGKILL, a bounded reap; also when cancelled."""
        reaped = await supervisor.end(
            proc,
            ask=lambda: supervisor.signal_group(proc, signal.SIGTERM),
            grace=STOP_GRACE_SECONDS,
        )
        if not reaped:
            self._stuck.unknown.append(proc)
            self.state.stuck_processes = self._stuck.count()
            self._log.error("ended neuron-monitor stuck", pid=proc.pid)
