"""Plain data passed from sources to the store and from the store to outputs.

Nothing here does I/O. Snapshots are immutable so that a renderer can read one
while the scheduler swaps in the next without any lock held across I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Union

from exporter.verdict import DeviceHealth

LabelValues = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HistogramValue:
    """A cumulative histogram: upper bounds (without +Inf), cumulative counts, sum.

    ``counts`` has one entry per bound plus one for +Inf, each cumulative, so
    ``counts[-1]`` is the total observation count.
    """

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds) + 1:
            raise ValueError("histogram needs one count per bound plus +Inf")

    @property
    def count(self) -> int:
        """Total number of observations."""
        return self.counts[-1]


Value = Union[float, HistogramValue]  # noqa: UP007 (runtime alias; Python 3.10)


@dataclass(frozen=True, slots=True)
class Reading:
    """One sample of one catalog family: family name, label values in catalog order, value."""

    metric: str
    labels: LabelValues
    value: Value


_new_object = object.__new__
# The slot descriptors of Reading: setting them directly is what the frozen
# dataclass __init__ does through object.__setattr__, and map() can call them
# without a Python frame per object.
_SET_METRIC = Reading.__dict__["metric"].__set__
_SET_LABELS = Reading.__dict__["labels"].__set__
_SET_VALUE = Reading.__dict__["value"].__set__


def readings_of(
    metric: str, labels: Iterable[LabelValues], values: Iterable[Value]
) -> list[Reading]:
    """``[Reading(metric, l, v) for l, v in zip(labels, values)]``, about twice as fast.

    The results are ordinary Readings; ``labels`` and ``values`` must be of equal
    length. For code that builds hundreds per poll from data it has already
    checked (a device worker's reply): every step runs in C, with no Python
    frame (and no frozen-dataclass ``__init__``) per reading.
    """
    labels = list(labels)
    out: list[Reading] = list(map(_new_object, repeat(Reading, len(labels))))
    deque(map(_SET_METRIC, out, repeat(metric)), maxlen=0)
    deque(map(_SET_LABELS, out, labels), maxlen=0)
    deque(map(_SET_VALUE, out, values), maxlen=0)
    return out


def is_number(value: object) -> bool:
    """True for a finite int or float that is not a bool (bools are not readings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a poll ended: ``ok`` plus a short snake_case reason and a human detail."""

    ok: bool
    reason: str = ""
    detail: str = ""
    # True when the source was not ready to answer (see SourcePending): not a result.
    pending: bool = False
    # True when the source cannot run on this node and that is a normal state here
    # (``enabled: auto`` before it ever worked; see SourceUnavailable): not a failure.
    unavailable: bool = False
    # Seconds until the source looks again by itself (SourceUnavailable.retry_in).
    retry_in: float | None = None


OK = Outcome(True)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The result of one poll of one source, replaced atomically in the store.

    ``completed_at`` is wall-clock seconds (for export), ``completed_mono`` the
    monotonic clock (for staleness, immune to clock steps).
    """

    source: str
    readings: tuple[Reading, ...]
    outcome: Outcome
    started_at: float
    completed_at: float
    completed_mono: float
    duration: float
    stale_after: float
    # The health verdict of each device the poll judged (device sources; see
    # exporter.verdict): what every consumer of the verdict reads.
    health: tuple[DeviceHealth, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the poll that made this snapshot succeeded."""
        return self.outcome.ok
