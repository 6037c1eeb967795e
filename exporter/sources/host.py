"""Host CPU, memory, load and boot time from /proc (the root is configurable for tests).

The files are parsed by :mod:`exporter.host.host_proc`; this source reads them and
turns the numbers into readings.

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

from exporter.config.host import HostSourceConfig
from exporter.errors import SourceError
from exporter.family_names import (
    ACCEL_HOST_BOOT_TIME_SECONDS,
    ACCEL_HOST_CPU_RATIO,
    ACCEL_HOST_CPU_SECONDS_TOTAL,
    ACCEL_HOST_CPUS,
    ACCEL_HOST_LOAD1,
    ACCEL_HOST_LOAD5,
    ACCEL_HOST_LOAD15,
    ACCEL_HOST_MEMORY_AVAILABLE_BYTES,
    ACCEL_HOST_MEMORY_TOTAL_BYTES,
)
from exporter.host.host_proc import (
    CLOCK_TICKS,
    CPU_MODES,
    CpuTimes,
    ProcParseError,
    cpu_ratios,
    parse_loadavg,
    parse_meminfo,
    parse_stat,
)
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source

BASELINE_SECONDS = 0.25


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
            readings.append(Reading(ACCEL_HOST_CPUS, (), float(now_times.cpus)))
            # Counters as node_exporter exports them: the ratio below covers only the
            # last poll, so a slower scrape would miss most of the time; these rate().
            readings.extend(
                Reading(ACCEL_HOST_CPU_SECONDS_TOTAL, (mode,), ticks / CLOCK_TICKS)
                for mode, ticks in zip(CPU_MODES, now_times.modes, strict=True)
            )
            if now_times.boot_time:
                readings.append(
                    Reading(ACCEL_HOST_BOOT_TIME_SECONDS, (), float(now_times.boot_time))
                )
            ratios = cpu_ratios(previous[1], now_times)
            if ratios is not None:
                readings.extend(
                    Reading(ACCEL_HOST_CPU_RATIO, (mode,), value) for mode, value in ratios.items()
                )
        except (OSError, ProcParseError) as exc:
            problems.append(f"stat: {exc}")
        try:
            mem = parse_meminfo(await self._call(self._read, "meminfo"))
            readings.append(Reading(ACCEL_HOST_MEMORY_TOTAL_BYTES, (), float(mem["MemTotal"])))
            if "MemAvailable" in mem:
                readings.append(
                    Reading(ACCEL_HOST_MEMORY_AVAILABLE_BYTES, (), float(mem["MemAvailable"]))
                )
        except (OSError, ProcParseError) as exc:
            problems.append(f"meminfo: {exc}")
        try:
            load = parse_loadavg(await self._call(self._read, "loadavg"))
            for name, value in zip(
                (ACCEL_HOST_LOAD1, ACCEL_HOST_LOAD5, ACCEL_HOST_LOAD15), load, strict=False
            ):
                readings.append(Reading(name, (), value))
        except (OSError, ProcParseError) as exc:
            problems.append(f"loadavg: {exc}")
        if problems:
            raise SourceError("read_error", "; ".join(problems), readings)
        return readings
