"""Cumulative vendor counters made safe to export: rates from deltas, energy made monotonic.

Level Zero's energy counter is known to drop for a poll and come back
(compute-runtime#938: ~200 J instead of ~22 MJ), and a uint64 underflow in a
peer turned such a drop into 3.69e12 W (xpumanager#130). A reading that goes
backwards, or forwards at an impossible rate, starts a new baseline: that
interval yields no rate, and the exported total does not move.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.backends.contract import MAX_WATTS

# The contract's ceiling (a faster energy increase is a counter fault), as named here.
MAX_PLAUSIBLE_WATTS = MAX_WATTS


@dataclass
class Delta:
    """The previous sample of one cumulative counter (value and timestamp, any units)."""

    value: float = -1.0
    stamp: float = -1.0

    def rate(self, value: float, stamp: float, limit: float = float("inf")) -> float | None:
        """Increase per unit of ``stamp`` since the previous sample, or None.

        None for the first sample, a timestamp that did not advance, a counter that
        went backwards (a reset or a spurious drop) or a rate above ``limit``; the
        sample becomes the new baseline either way.
        """
        prev_value, prev_stamp = self.value, self.stamp
        self.value, self.stamp = value, stamp
        if prev_stamp < 0 or stamp <= prev_stamp or value < prev_value:
            return None
        rate = (value - prev_value) / (stamp - prev_stamp)
        return rate if rate <= limit else None


@dataclass
class Energy:
    """A monotonic energy total from a device counter that may drop or jump.

    ``per_joule`` is the counter's unit (1_000_000 for µJ, 1000 for mJ). The
    total starts at the counter's first value and then grows only by plausible
    increases (at most :data:`MAX_PLAUSIBLE_WATTS` over the interval), so a
    counter that drops and comes back never shows as a burst of energy. It is
    kept in the counter's integer unit and divided once, so it is exact.
    """

    per_joule: int
    total: int = -1
    delta: Delta | None = None

    def update(self, raw: int, seconds: float) -> tuple[float, float | None]:
        """The total in joules after ``raw`` at ``seconds``; the watts when trustworthy."""
        if self.delta is None:
            self.delta = Delta()
        prev = int(self.delta.value)
        rate = self.delta.rate(raw, seconds, MAX_PLAUSIBLE_WATTS * self.per_joule)
        if self.total < 0:
            self.total = raw
        elif rate is not None:
            self.total += raw - prev
        return self.total / self.per_joule, None if rate is None else rate / self.per_joule
