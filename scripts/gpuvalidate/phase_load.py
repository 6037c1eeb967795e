"""Phase 3: a torch matmul loop, then idle: the activity families must follow.

Utilization, SM and tensor activity, power, energy and memory must move as they must.

Bounds are loose on purpose (any H100/H200 clears them by far under bf16 matmuls):
they catch a family that does not move, moves the wrong way, or is off by a unit,
not a slow GPU. Energy is checked against nvidia-smi's power samples integrated
over the same window (nvidia-smi has no energy field to query).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .compare import Check
from .expo import Samples, find, one
from .phases import Kit
from .report import Phase
from .smi import Cell
from .workloads import TORCH, gpu_of, wait_marker

LOAD_SECONDS = 25.0
IDLE_SECONDS = 12.0
SMI_FIELDS = ("uuid", "power.draw", "utilization.gpu", "memory.used")
MIB = 1048576.0


@dataclass
class Series:
    """Samples of one GPU over a window: exporter and nvidia-smi, with their times."""

    times: list[float] = field(default_factory=list)
    exporter: list[Samples] = field(default_factory=list)
    smi_times: list[float] = field(default_factory=list)
    smi: list[dict[str, dict[str, Cell]]] = field(default_factory=list)  # per query: by UUID

    def values(self, name: str, uuid: str, **labels: str) -> list[float]:
        """The exporter's values of one series, where present."""
        out = [one(s, name, uuid=uuid, **labels) for s in self.exporter]
        return [v for v in out if v is not None]

    def pipe(self, uuid: str, word: str) -> list[float]:
        """The highest ``accel_pipe_active_ratio`` whose ``pipe`` names ``word``, per sample."""
        out = []
        for s in self.exporter:
            hits = [
                v
                for labels, v in find(s, "accel_pipe_active_ratio", uuid=uuid)
                if word in labels.get("pipe", "")
            ]
            if hits:
                out.append(max(hits))
        return out

    def smi_values(self, name: str, uuid: str) -> tuple[list[float], list[float]]:
        """nvidia-smi's numbers of one field of one GPU where present, and their times."""
        times, values = [], []
        for at, rows in zip(self.smi_times, self.smi, strict=True):
            row = rows.get(uuid)
            if row is not None and row[name].present:
                times.append(at)
                values.append(row[name].number())
        return times, values


def integral(times: Sequence[float], watts: Sequence[float]) -> float:
    """Trapezoid integral of power samples: joules."""
    return sum(
        (t1 - t0) * (w0 + w1) / 2
        for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:], strict=False)
    )


def sample(kit: Kit, seconds: float, series: Series, until: Any = None) -> None:
    """Scrape the daemon and query nvidia-smi about once a second for ``seconds``."""
    assert kit.daemon is not None
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (until and until()):
        scrape = kit.daemon.scrape()
        series.times.append(scrape.at)
        series.exporter.append(scrape.samples)
        query = kit.smi.query(SMI_FIELDS)
        series.smi_times.append(query.at)
        series.smi.append({row["uuid"].text: row for row in query.rows})
        time.sleep(max(0.0, 1.0 - (time.monotonic() - scrape.at)))


def mean(values: Sequence[float]) -> float | None:
    """The mean, None for no values."""
    return statistics.fmean(values) if values else None


def figures(series: Series, uuid: str) -> dict[str, Any]:
    """What one window showed."""
    energy = series.values("accel_energy_joules_total", uuid)
    power_times, smi_power = series.smi_values("power.draw", uuid)
    return {
        "utilization_mean": mean(series.values("accel_utilization_ratio", uuid)),
        "power_watts_mean": mean(series.values("accel_power_watts", uuid)),
        "smi_power_watts_mean": mean(smi_power),
        "smi_utilization_percent_mean": mean(series.smi_values("utilization.gpu", uuid)[1]),
        "energy_joules": energy[-1] - energy[0] if len(energy) > 1 else None,
        "smi_energy_joules": integral(power_times, smi_power) if len(smi_power) > 1 else None,
        "window_seconds": series.times[-1] - series.times[0] if series.times else 0.0,
        "memory_used_bytes_max": max(series.values("accel_memory_used_bytes", uuid), default=None),
        "sm_active_mean": mean(series.values("accel_sm_active_ratio", uuid)),
        "tensor_active_mean": mean(series.pipe(uuid, "tensor")),
        "samples": len(series.times),
    }


def run_phase(kit: Kit, phase: Phase) -> None:
    """Idle baseline, load window, idle window; then the loose checks."""
    phase.figures["torch"] = kit.need_torch()
    kit.need_daemon()
    baseline = Series()
    sample(kit, 3.0, baseline)
    marker = kit.work / "load.marker"
    proc = kit.spawn(
        [kit.python, "-c", TORCH, "load", str(LOAD_SECONDS), str(marker)], log="load.log"
    )
    phase.figures["load_pid"] = proc.pid
    uuid = gpu_of(kit.gpus(), wait_marker(marker, proc, timeout=90))
    phase.figures["uuid"] = uuid
    time.sleep(2.0)  # past the first poll after the load began
    busy = Series()
    sample(kit, LOAD_SECONDS - 4.0, busy, until=lambda: proc.poll() is not None)
    proc.wait(timeout=LOAD_SECONDS + 30)
    time.sleep(3.0)  # utilization is averaged over the driver's last sample period
    idle = Series()
    sample(kit, IDLE_SECONDS - 3.0, idle)
    base, load, rest = figures(baseline, uuid), figures(busy, uuid), figures(idle, uuid)
    phase.figures.update({"baseline": base, "load": load, "idle": rest})
    phase.figures["workload"] = (kit.work / "load.log").read_text().strip().splitlines()[-1:]
    _checks(phase, base, load, rest)


def _checks(phase: Phase, base: dict[str, Any], load: dict[str, Any], rest: dict[str, Any]) -> None:
    util_load, util_idle = load["utilization_mean"], rest["utilization_mean"]
    phase.check("utilization under load", (util_load or 0) >= 0.5, seen=util_load, bound=">= 0.5")
    phase.check(
        "utilization idle",
        util_idle is not None and util_idle <= 0.2,
        seen=util_idle,
        bound="<= 0.2",
    )
    p_load, p_idle = load["power_watts_mean"], rest["power_watts_mean"]
    phase.check(
        "power rises under load",
        p_load is not None and p_idle is not None and p_load >= p_idle + 30,
        seen=[p_idle, p_load],
        bound="load >= idle + 30 W",
    )
    e, smi_e = load["energy_joules"], load["smi_energy_joules"]
    phase.check(
        "energy counter vs nvidia-smi power integral (load)",
        e is not None and smi_e is not None and abs(e - smi_e) <= 0.25 * smi_e + 50,
        seen=[e, smi_e],
        bound="within 25% + 50 J",
    )
    rate_load = (e or 0) / load["window_seconds"] if load["window_seconds"] else 0
    rate_idle = (
        (rest["energy_joules"] or 0) / rest["window_seconds"] if rest["window_seconds"] else 0
    )
    phase.check(
        "energy grows faster under load",
        rate_load > rate_idle > 0,
        seen=[rate_idle, rate_load],
        bound="idle > 0 and load > idle (J/s)",
    )
    m_base, m_load = base["memory_used_bytes_max"], load["memory_used_bytes_max"]
    phase.check(
        "memory used rises by the workload's allocations",
        m_base is not None and m_load is not None and m_load - m_base >= 1024 * MIB,
        seen=[m_base, m_load],
        bound=">= +1 GiB (the workload holds 1.25 GiB)",
    )
    for name, key, bound in (
        ("SM active under load (GPM)", "sm_active_mean", 0.3),
        ("tensor pipe active under load (GPM)", "tensor_active_mean", 0.05),
    ):
        value = load[key]
        if value is None:
            phase.checks.append(_absent(name))
        else:
            phase.check(name, value >= bound, seen=value, bound=f">= {bound}")
            idle_value = rest[key]
            phase.check(
                name.replace("under load", "idle"),
                idle_value is not None and idle_value < value,
                seen=[idle_value, value],
                bound="below the load figure",
            )


def _absent(name: str) -> Check:
    return Check(name, "", "skip", note="this build does not export the family")
