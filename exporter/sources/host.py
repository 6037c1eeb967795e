"""Host CPU, memory, load and boot time from /proc (the root is configurable for tests).

CPU time is exported as node_exporter does, a counter of seconds per mode
(``accel_host_cpu_seconds_total``, summed over CPUs), for ``rate()``. CPU ratios
are computed between two readings of /proc/stat, so they describe the last
interval. The first poll takes its own short baseline rather than exporting the
average since boot under a name that promises "last interval". A file that
cannot be read or parsed degrades only its own fields; the source is then
reported down with the reason ``read_error`` while the rest is kept.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.config.host import HostSourceConfig
from exporter.errors import SourceError
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source

# /proc/stat cpu columns after the label; guest time is already counted in user.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
BASELINE_SECONDS = 0.25


class ProcParseError(Exception):
    """A /proc file did not have the expected shape."""


# /proc/stat counts in USER_HZ ticks (100 on every Linux ABI, but ask).
CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies per mode summed over all CPUs, the number of CPUs, boot time (0: unknown)."""

    modes: tuple[int, ...]
    cpus: int
    boot_time: int = 0


def parse_stat(text: str) -> CpuTimes:
    """Parse /proc/stat's aggregate cpu line and count the per-CPU lines."""
    total: tuple[int, ...] | None = None
    cpus = 0
    boot = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = line.split()[1:]
            if len(fields) < 4:
                raise ProcParseError("cpu line has fewer than 4 columns")
            try:
                values = [int(v) for v in fields[: len(CPU_MODES)]]
            except ValueError:
                raise ProcParseError("cpu line has a non-integer column") from None
            values += [0] * (len(CPU_MODES) - len(values))
            total = tuple(values)
        elif line.startswith("cpu") and line[3:4].isdigit():
            cpus += 1
        elif line.startswith("btime "):
            value = line.split()[1:2]
            boot = int(value[0]) if value and value[0].isdigit() else 0
    if total is None:
        raise ProcParseError("no aggregate cpu line")
    return CpuTimes(total, cpus, boot)


def cpu_ratios(before: CpuTimes, after: CpuTimes) -> dict[str, float] | None:
    """Share of time per mode between two readings; None when no time passed."""
    deltas = [max(0, b - a) for a, b in zip(before.modes, after.modes, strict=False)]
    elapsed = sum(deltas)
    if elapsed <= 0:
        return None
    return {mode: delta / elapsed for mode, delta in zip(CPU_MODES, deltas, strict=False)}


def parse_meminfo(text: str) -> dict[str, int]:
    """MemTotal and MemAvailable in bytes (kB in the file)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            parts = rest.split()
            if not parts or not parts[0].isdigit():
                raise ProcParseError(f"{key} is not a number")
            scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            out[key] = int(parts[0]) * scale
    if "MemTotal" not in out:
        raise ProcParseError("no MemTotal line")
    return out


def parse_loadavg(text: str) -> tuple[float, float, float]:
    """The three load averages."""
    parts = text.split()
    if len(parts) < 3:
        raise ProcParseError("fewer than 3 fields")
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except ValueError:
        raise ProcParseError("load average is not a number") from None


class HostSource(Source):
    """Reads /proc/stat, /proc/meminfo and /proc/loadavg."""

    def __init__(self, name: str, config: HostSourceConfig) -> None:
        super().__init__(name, config)
        self.proc = config.proc_path
        self._call = BlockingCall(name)
        self._previous: tuple[float, CpuTimes] | None = None

    def _read(self, relative: str) -> str:
        with open(os.path.join(self.proc, relative), encoding="ascii", errors="replace") as fh:
            return fh.read()

    def _stat(self) -> CpuTimes:
        return parse_stat(self._read("stat"))

    async def poll(self) -> Sequence[Reading]:
        """Read everything; fields that fail are left out and the poll reports read_error."""
        readings: list[Reading] = []
        problems: list[str] = []
        try:
            now_times = await self._call(self._stat)
            taken = time.monotonic()
            previous = self._previous
            baseline = min(BASELINE_SECONDS, 0.4 * self.timeout)
            if previous is None or taken - previous[0] < baseline / 2:
                # Saved before sleeping so that even a cancelled poll leaves a baseline.
                previous = self._previous = (taken, now_times)
                await asyncio.sleep(baseline)
                now_times = await self._call(self._stat)
                taken = time.monotonic()
            self._previous = (taken, now_times)
            readings.append(Reading("accel_host_cpus", (), float(now_times.cpus)))
            # Counters as node_exporter exports them: the ratio below covers only the
            # last poll, so a slower scrape would miss most of the time; these rate().
            readings.extend(
                Reading("accel_host_cpu_seconds_total", (mode,), ticks / CLOCK_TICKS)
                for mode, ticks in zip(CPU_MODES, now_times.modes, strict=True)
            )
            if now_times.boot_time:
                readings.append(
                    Reading("accel_host_boot_time_seconds", (), float(now_times.boot_time))
                )
            ratios = cpu_ratios(previous[1], now_times)
            if ratios is not None:
                readings.extend(
                    Reading("accel_host_cpu_ratio", (mode,), value)
                    for mode, value in ratios.items()
                )
        except (OSError, ProcParseError) as exc:
            problems.append(f"stat: {exc}")
        try:
            mem = parse_meminfo(await self._call(self._read, "meminfo"))
            readings.append(Reading("accel_host_memory_total_bytes", (), float(mem["MemTotal"])))
            if "MemAvailable" in mem:
                readings.append(
                    Reading("accel_host_memory_available_bytes", (), float(mem["MemAvailable"]))
                )
        except (OSError, ProcParseError) as exc:
            problems.append(f"meminfo: {exc}")
        try:
            load = parse_loadavg(await self._call(self._read, "loadavg"))
            for name, value in zip(
                ("accel_host_load1", "accel_host_load5", "accel_host_load15"), load, strict=False
            ):
                readings.append(Reading(name, (), value))
        except (OSError, ProcParseError) as exc:
            problems.append(f"loadavg: {exc}")
        if problems:
            raise SourceError("read_error", "; ".join(problems), readings)
        return readings
