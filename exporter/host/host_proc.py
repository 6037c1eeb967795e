"""The host's /proc files as numbers: CPU times per mode, memory, load averages.

Pure parsing of text the caller read (the host source reads the files under its
configured root, through its blocking-call guard); nothing here opens a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# /proc/stat cpu columns after the label; guest time is already counted in user.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


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
