"""Aggregates of a recorded run: pure arithmetic over timestamped samples.

Means are sample means (samples are taken on a fixed interval) over the
samples taken while the command ran; a command shorter than the interval, during
which no sample completed, gets them from the samples just before and just after
it instead (``samples_taken: "around"``), rather than none at all. Energy comes
from the device's energy counter (the sum of its increases between samples, so a counter reset loses
nothing but the reset's own interval); a device without the counter gets the
trapezoid integral of its power instead. The samples just before the command
started and just after it ended otherwise only delimit the energy
(``aggregate=False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Gauge:
    """Mean and maximum of a sampled quantity."""

    count: int = 0
    total: float = 0.0
    peak: float | None = None

    def add(self, value: float) -> None:
        """One sample."""
        self.count += 1
        self.total += value
        self.peak = value if self.peak is None else max(self.peak, value)

    def summary(self) -> dict[str, float] | None:
        """``{"mean", "max"}``, or None without samples."""
        if not self.count or self.peak is None:
            return None
        return {"mean": self.total / self.count, "max": self.peak}


@dataclass
class Energy:
    """Energy from a cumulative counter, with power integration as the fallback."""

    counter_joules: float = 0.0
    counter_samples: int = 0
    last_counter: float | None = None
    power_joules: float = 0.0
    last_power: tuple[float, float] | None = None  # (time, watts)

    def add_counter(self, value: float) -> float:
        """A counter reading; the increase it adds (0 for the first)."""
        previous, self.last_counter = self.last_counter, value
        self.counter_samples += 1
        if previous is None:
            return 0.0
        # A counter that went down was reset (driver reload): it restarted from zero.
        step = value - previous if value >= previous else value
        self.counter_joules += step
        return step

    def add_power(self, when: float, watts: float) -> float:
        """A power reading; the energy since the previous one (trapezoid)."""
        previous, self.last_power = self.last_power, (when, watts)
        if previous is None or when <= previous[0]:
            return 0.0
        step = (when - previous[0]) * (watts + previous[1]) / 2
        self.power_joules += step
        return step

    def summary(self) -> tuple[float | None, str]:
        """(joules, how they were measured)."""
        if self.counter_samples >= 2:
            return self.counter_joules, "counter"
        if self.last_power is not None:
            return self.power_joules, "power_integral"
        return None, "none"


@dataclass
class DeviceStats:
    """Everything aggregated about one device over a run (or a phase)."""

    memory: Gauge = field(default_factory=Gauge)
    utilization: Gauge = field(default_factory=Gauge)
    power: Gauge = field(default_factory=Gauge)
    energy_joules: float = 0.0

    @property
    def samples(self) -> int:
        """How many polls reported any of the sampled fields."""
        return max(self.memory.count, self.utilization.count, self.power.count)

    def summary(self) -> dict[str, Any]:
        """The JSON form."""
        memory = self.memory.summary()
        return {
            "peak_memory_bytes": memory["max"] if memory else None,
            "utilization_ratio": self.utilization.summary(),
            "power_watts": self.power.summary(),
            "energy_joules": self.energy_joules,
            "samples": self.samples,
        }


@dataclass
class HostStats:
    """Host CPU time shares over a run (or a phase)."""

    user: Gauge = field(default_factory=Gauge)
    idle: Gauge = field(default_factory=Gauge)

    def summary(self) -> dict[str, Any]:
        """The JSON form."""
        user, idle = self.user.summary(), self.idle.summary()
        return {
            "cpu_user_ratio_mean": user["mean"] if user else None,
            "cpu_idle_ratio_mean": idle["mean"] if idle else None,
            "samples": self.user.count,
        }


@dataclass
class Phase:
    """A named stretch of the run, from its marker to the next one (or the end)."""

    name: str
    start: float
    end: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, DeviceStats] = field(default_factory=dict)
    host: HostStats = field(default_factory=HostStats)


@dataclass
class DeviceSample:
    """One device's fields in one poll (None: not reported)."""

    memory_used_bytes: float | None = None
    utilization_ratio: float | None = None
    power_watts: float | None = None
    energy_joules_total: float | None = None


class RunStats:
    """Accumulates samples for the whole run and for the current phase."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.end: float | None = None
        self.devices: dict[str, DeviceStats] = {}
        self.energy: dict[str, Energy] = {}
        self.host = HostStats()
        # The baseline and final samples: the fallback for a run too short to sample.
        self.around: dict[str, DeviceStats] = {}
        self.host_around = HostStats()
        self.phases: list[Phase] = []
        self.identity: dict[str, dict[str, str]] = {}

    def _targets(self, uuid: str) -> list[DeviceStats]:
        out = [self.devices.setdefault(uuid, DeviceStats())]
        if self.phases:
            out.append(self.phases[-1].devices.setdefault(uuid, DeviceStats()))
        return out

    def add_device(
        self, when: float, uuid: str, sample: DeviceSample, aggregate: bool = True
    ) -> None:
        """One device's fields from one poll; ``aggregate`` False: energy only."""
        targets = self._targets(uuid)
        energy = self.energy.setdefault(uuid, Energy())
        step = None
        if sample.energy_joules_total is not None:
            step = energy.add_counter(sample.energy_joules_total)
        if sample.power_watts is not None:
            integral = energy.add_power(when, sample.power_watts)
            if step is None and energy.counter_samples == 0:
                step = integral
        for stats in targets:
            if step is not None:
                stats.energy_joules += step
        if not aggregate:
            targets = [self.around.setdefault(uuid, DeviceStats())]
        for stats in targets:
            if sample.memory_used_bytes is not None:
                stats.memory.add(sample.memory_used_bytes)
            if sample.utilization_ratio is not None:
                stats.utilization.add(sample.utilization_ratio)
            if sample.power_watts is not None:
                stats.power.add(sample.power_watts)

    def add_host(self, user: float | None, idle: float | None, aggregate: bool = True) -> None:
        """The host's CPU shares from one poll; ``aggregate`` False: baseline or final."""
        targets = [self.host] + ([self.phases[-1].host] if self.phases else [])
        if not aggregate:
            targets = [self.host_around]
        for stats in targets:
            if user is not None:
                stats.user.add(user)
            if idle is not None:
                stats.idle.add(idle)

    def begin_phase(self, name: str, when: float, data: dict[str, Any]) -> None:
        """A phase marker: ends the current phase and starts ``name``."""
        if self.phases:
            self.phases[-1].end = when
        self.phases.append(Phase(name, when, data=data))

    def finish(self, when: float) -> None:
        """The command ended."""
        self.end = when
        if self.phases and self.phases[-1].end is None:
            self.phases[-1].end = when

    def summary(self) -> dict[str, Any]:
        """The summary.json document (without the command fields the caller adds)."""
        end = self.end if self.end is not None else self.start
        devices = {}
        for uuid in sorted(self.devices.keys() | self.around.keys()):
            stats, taken = _during_or_around(self.devices.get(uuid), self.around.get(uuid))
            entry = {**self.identity.get(uuid, {}), **stats.summary(), "samples_taken": taken}
            joules, method = self.energy.get(uuid, Energy()).summary()
            entry["energy_joules"] = joules
            entry["energy_method"] = method
            devices[uuid] = entry
        phases = []
        for phase in self.phases:
            stop = phase.end if phase.end is not None else end
            phases.append(
                {
                    "name": phase.name,
                    "start": phase.start,
                    "end": stop,
                    "wall_seconds": max(0.0, stop - phase.start),
                    "data": phase.data,
                    "devices": {u: s.summary() for u, s in sorted(phase.devices.items())},
                    "host": phase.host.summary(),
                }
            )
        host, taken = (
            (self.host, "during")
            if self.host.user.count or not self.host_around.user.count
            else (self.host_around, "around")
        )
        return {
            "start_time": self.start,
            "end_time": end,
            "wall_seconds": max(0.0, end - self.start),
            "devices": devices,
            "host": {**host.summary(), "samples_taken": taken},
            "phases": phases,
        }


def _during_or_around(
    during: DeviceStats | None, around: DeviceStats | None
) -> tuple[DeviceStats, str]:
    """The in-run aggregates, or the baseline/final ones when no sample fell in the run."""
    if during is not None and (during.samples or around is None or not around.samples):
        return during, "during"
    if around is not None and around.samples:
        # Energy is always measured from the bracketing samples; keep it.
        merged = DeviceStats(around.memory, around.utilization, around.power)
        merged.energy_joules = during.energy_joules if during is not None else 0.0
        return merged, "around"
    return DeviceStats(), "during"
