"""The snapshot store: the latest snapshot of every source, swapped atomically.

Sources write (from the event loop), outputs read (from HTTP threads and the
OTel export thread). Writers hold the lock only to swap a reference and update
a few counters; readers hold it only to copy references. Nothing holds it
across I/O. A snapshot older than its ``stale_after`` is left out of views, so
its series disappear instead of lying.

Readings are checked against the catalog before they are stored
(:func:`validate`). A label value outside its row's enumeration (the row's
``values``) is dropped: in production the first sighting of each such
(family, label, value) is reported to the caller, which logs it, and later ones
are dropped silently, so a backend that starts speaking a new word costs one log
line and never fails a scrape. The test suite sets ``ACCEL_STRICT_LABEL_VALUES=1``
(tests/conftest.py), under which the same reading raises :class:`LabelValueError`,
so a test that makes a backend emit an unknown value fails.

Every snapshot is also held to the series budget its families declare (the catalog
rows' ``max_series``, :mod:`exporter.series_budget`): per source and family, label
sets past the budget are dropped and counted in
``accel_exporter_series_dropped_total{source,family}``, and a family going over (or
back within) is logged once.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter import __version__, log, series_budget
from exporter.catalog import CATALOG, Kind, MetricSpec
from exporter.catalog.exporter_self import POLL_DURATION_BUCKETS
from exporter.family_names import (
    ACCEL_EXPORTER_BUILD_INFO,
    ACCEL_EXPORTER_SERIES_DROPPED_TOTAL,
    ACCEL_EXPORTER_SOURCE_DOWN_REASON_INFO,
    ACCEL_EXPORTER_SOURCE_ERRORS_TOTAL,
    ACCEL_EXPORTER_SOURCE_LAST_SUCCESS_TIMESTAMP_SECONDS,
    ACCEL_EXPORTER_SOURCE_POLL_DURATION_SECONDS,
    ACCEL_EXPORTER_SOURCE_UNAVAILABLE_INFO,
    ACCEL_EXPORTER_SOURCE_UP,
    ACCEL_EXPORTER_WORKER_RESTARTS_TOTAL,
)
from exporter.model import HistogramValue, Reading, Snapshot, is_number
from exporter.verdict import DeviceHealth

# The source label of the daemon's own families (accel_exporter_series).
SELF_SOURCE = "exporter"


class HistogramAccumulator:
    """Counts observations into fixed buckets; :meth:`value` gives the cumulative form."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        """Add one observation."""
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self._counts[i] += 1
                break
        else:
            self._counts[-1] += 1
        self._sum += value

    def value(self) -> HistogramValue:
        """Cumulative counts, as exposition formats want them."""
        running = 0
        cumulative = []
        for count in self._counts:
            running += count
            cumulative.append(running)
        return HistogramValue(self.bounds, tuple(cumulative), self._sum)


@dataclass
class SourceRecord:
    """Everything the store knows about one source (mutated only under the store lock)."""

    name: str
    snapshot: Snapshot | None = None
    last_success: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    durations: HistogramAccumulator = field(
        default_factory=lambda: HistogramAccumulator(POLL_DURATION_BUCKETS)
    )
    polls: int = 0
    restarts: int = 0
    unavailable: str | None = None
    unavailable_detail: str = ""
    # The last count a source reported and what earlier runners had counted: a
    # reload builds new runners that count from 0, the exported counter must not.
    restarts_reported: int = 0
    restarts_before: int = 0
    # family -> series dropped over its budget, summed over snapshots; and the
    # families over budget in the last snapshot (a change is logged once).
    dropped: dict[str, int] = field(default_factory=dict)
    over_budget: frozenset[str] = frozenset()

    def count_dropped(self, dropped: Mapping[str, int]) -> tuple[list[str], list[str]]:
        """Add one snapshot's drops; the families that went over, and back within, budget."""
        for family, count in dropped.items():
            self.dropped[family] = self.dropped.get(family, 0) + count
        now = frozenset(dropped)
        went, back = sorted(now - self.over_budget), sorted(self.over_budget - now)
        self.over_budget = now
        return went, back

    def count_restarts(self, reported: int) -> None:
        """Fold a source's own restart count into a counter that never goes back."""
        if reported < self.restarts_reported:
            self.restarts_before += self.restarts_reported
        self.restarts_reported = reported
        self.restarts = self.restarts_before + reported

    def copy(self) -> SourceRecordView:
        """An immutable copy for readers."""
        return SourceRecordView(
            name=self.name,
            snapshot=self.snapshot,
            last_success=self.last_success,
            errors=tuple(sorted(self.errors.items())),
            durations=self.durations.value(),
            polls=self.polls,
            restarts=self.restarts,
            unavailable=self.unavailable,
            unavailable_detail=self.unavailable_detail,
            dropped=tuple(sorted(self.dropped.items())),
        )


def _fresh(snap: Snapshot | None, now_mono: float) -> bool:
    return snap is not None and now_mono - snap.completed_mono <= snap.stale_after


@dataclass(frozen=True)
class SourceRecordView:
    """Read-only copy of a :class:`SourceRecord`."""

    name: str
    snapshot: Snapshot | None
    last_success: float | None
    errors: tuple[tuple[str, int], ...]
    durations: HistogramValue
    polls: int
    restarts: int
    unavailable: str | None
    unavailable_detail: str
    # (family, series dropped over its budget), summed over snapshots.
    dropped: tuple[tuple[str, int], ...] = ()

    @property
    def answered(self) -> bool:
        """Whether a poll has ended (with a result or a failure), or the source is unavailable.

        A snapshot of a pending poll before that (what a starting source already
        knows) is shown but is no answer: readiness and the source's state wait.
        """
        return self.polls > 0 or self.unavailable is not None

    def fresh(self, now_mono: float) -> bool:
        """True when there is a snapshot younger than its stale_after."""
        return _fresh(self.snapshot, now_mono)

    def down_reason(self, now_mono: float) -> str:
        """Why the source is down, or empty when it is up (or has not polled yet)."""
        snap = self.snapshot
        if snap is None:
            return ""
        if not snap.outcome.ok:
            return snap.outcome.reason or "error"
        return "" if self.fresh(now_mono) else "stale"


class View:
    """What one render sees: fresh snapshots plus the daemon's own readings."""

    def __init__(
        self,
        key: tuple[object, ...],
        readings: Iterable[Reading],
        parts: Sequence[tuple[str, Sequence[Reading]]] = (),
        verdicts: Iterable[DeviceHealth] = (),
    ) -> None:
        self.key = key
        # Later sources win on a uuid two sources judge, as on a duplicate series.
        self._health = {v.uuid: v for v in verdicts}
        # Who reported what (source name, its readings), for the series count per source.
        self.parts = parts
        grouped: dict[str, dict[tuple[str, ...], Reading]] = {}
        for reading in readings:
            # Later sources win on an exact duplicate series rather than emitting it twice.
            grouped.setdefault(reading.metric, {})[reading.labels] = reading
        self._by_metric = {name: list(series.values()) for name, series in grouped.items()}

    def readings(self, metric: str) -> list[Reading]:
        """Every reading of one family (empty when none)."""
        return self._by_metric.get(metric, [])

    def metrics(self) -> list[str]:
        """Names of the families that have readings."""
        return list(self._by_metric)

    def health(self) -> Mapping[str, DeviceHealth]:
        """The verdict of every device a fresh snapshot judged, by uuid.

        A device whose source is stale, gone or not polled yet is absent: no
        verdict, which every consumer treats as unknown.
        """
        return self._health


class Store:
    """Latest snapshot per source, staleness, and per-source poll statistics."""

    def __init__(
        self,
        mono: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        catalog: Mapping[str, MetricSpec] = CATALOG,
    ) -> None:
        # The catalog as this daemon's configuration exports it (some rows carry
        # configured labels); every reading and every output goes by it.
        self.catalog = catalog
        self._budget = series_budget.limits(catalog)
        self._mono = mono
        self._wall = wall
        self._lock = threading.Lock()
        # Notified on every change: what renders ahead of scrapes waits on it.
        self._changed = threading.Condition(self._lock)
        self._records: dict[str, SourceRecord] = {}
        self._internal: dict[str, tuple[Reading, ...]] = {}
        # What published readings dropped over budget, by name (only .dropped is used).
        self._internal_drops: dict[str, SourceRecord] = {}
        self._generation = 0
        self._view: View | None = None

    @property
    def generation(self) -> int:
        """Bumped on every change."""
        return self._generation

    def _bump(self) -> None:
        # Called with the lock held.
        self._generation += 1
        self._changed.notify_all()

    def wait_changed(self, generation: int, timeout: float | None = None) -> int:
        """Block until the store changed since ``generation``; the generation now.

        Also returns at ``timeout`` and on ``wake()``.
        """
        with self._changed:
            if self._generation == generation:
                self._changed.wait(timeout)
            return self._generation

    def wake(self) -> None:
        """Release every ``wait_changed`` now (a waiter that is stopping)."""
        with self._changed:
            self._changed.notify_all()

    def register(self, source: str) -> None:
        """Make a source known before its first poll (it shows in /status)."""
        with self._lock:
            self._records.setdefault(source, SourceRecord(source))
            self._bump()

    def unregister(self, source: str) -> None:
        """Forget a source (after a reload removed it)."""
        with self._lock:
            self._records.pop(source, None)
            self._bump()

    def succeeded(self, source: str) -> bool:
        """Whether a poll of ``source`` ever succeeded (kept across reloads)."""
        with self._lock:
            record = self._records.get(source)
            return record is not None and record.last_success is not None

    def names(self) -> list[str]:
        """Registered sources, in registration order."""
        with self._lock:
            return list(self._records)

    def _within_budget(self, snapshot: Snapshot) -> tuple[Snapshot, dict[str, int]]:
        """The snapshot held to its families' series budgets, and what was dropped."""
        kept, dropped = series_budget.enforce(snapshot.readings, self._budget)
        if dropped:
            snapshot = dataclasses.replace(snapshot, readings=tuple(kept))
        return snapshot, dropped

    def _note_budget(
        self, source: str, went: list[str], back: list[str], dropped: Mapping[str, int]
    ) -> None:
        """Log a family going over its budget, or back within, once (outside the lock)."""
        logger = log.get(source=source)
        for family in went:
            logger.warning(
                "series over budget, dropped",
                family=family,
                max_series=self._budget.get(family, 0),
                dropped=dropped.get(family, 0),
            )
        for family in back:
            logger.info("series within budget again", family=family)

    def put(self, snapshot: Snapshot, *, restarts: int | None = None) -> None:
        """Swap in a source's newest snapshot and account for the poll."""
        snapshot, dropped = self._within_budget(snapshot)
        with self._lock:
            record = self._records.setdefault(snapshot.source, SourceRecord(snapshot.source))
            went, back = record.count_dropped(dropped)
            record.snapshot = snapshot
            record.unavailable = None
            record.polls += 1
            record.durations.observe(snapshot.duration)
            if snapshot.ok:
                record.last_success = snapshot.completed_at
            else:
                reason = snapshot.outcome.reason or "error"
                record.errors[reason] = record.errors.get(reason, 0) + 1
            if restarts is not None:
                record.count_restarts(restarts)
            self._bump()
        self._note_budget(snapshot.source, went, back, dropped)

    def pending(self, snapshot: Snapshot, *, restarts: int | None = None) -> None:
        """A poll that had no result yet (a worker starting): counted nowhere.

        Its readings, if any (what the source still knows, e.g. devices down while
        their worker restarts, or the devices a first bootstrap has identified so
        far), replace the last snapshot's; without readings the last snapshot stays
        until it goes stale, and before a first snapshot the source stays "not
        polled yet".
        """
        went: list[str] = []
        back: list[str] = []
        dropped: dict[str, int] = {}
        if snapshot.readings:
            snapshot, dropped = self._within_budget(snapshot)
        with self._lock:
            record = self._records.setdefault(snapshot.source, SourceRecord(snapshot.source))
            if snapshot.readings and record.unavailable is None:
                went, back = record.count_dropped(dropped)
                record.snapshot = snapshot
            if restarts is not None:
                record.count_restarts(restarts)
            self._bump()
        self._note_budget(snapshot.source, went, back, dropped)

    def record(self, snapshot: Snapshot, *, restarts: int | None = None) -> None:
        """Record a poll's snapshot by its outcome: a result, pending, or unavailable."""
        if snapshot.outcome.pending:
            self.pending(snapshot, restarts=restarts)
        elif snapshot.outcome.unavailable:
            self.mark_unavailable(
                snapshot.source,
                snapshot.outcome.reason,
                detail=snapshot.outcome.detail,
                restarts=restarts,
                snapshot=snapshot if snapshot.readings else None,
            )
        else:
            self.put(snapshot, restarts=restarts)

    def mark_unavailable(
        self,
        source: str,
        reason: str,
        *,
        detail: str = "",
        restarts: int | None = None,
        snapshot: Snapshot | None = None,
    ) -> None:
        """Record that an ``enabled: auto`` source cannot run here.

        ``reason`` is a short code (exported as a label), ``detail`` the human text.
        Its data is dropped, except what ``snapshot`` still holds (e.g. how many of
        this vendor's devices the PCI bus has, which a missing driver cannot see).
        """
        went: list[str] = []
        back: list[str] = []
        dropped: dict[str, int] = {}
        if snapshot is not None:
            snapshot, dropped = self._within_budget(snapshot)
        with self._lock:
            record = self._records.setdefault(source, SourceRecord(source))
            if snapshot is not None:
                went, back = record.count_dropped(dropped)
            record.snapshot = snapshot
            record.unavailable = reason
            record.unavailable_detail = detail or reason
            if restarts is not None:
                record.count_restarts(restarts)
            self._bump()
        self._note_budget(source, went, back, dropped)

    def publish(self, name: str, readings: Sequence[Reading]) -> None:
        """Set readings that belong to the daemon itself (no staleness, no source health).

        Held to the series budget like a source's (``name`` is the source label).
        """
        kept, dropped = series_budget.enforce(readings, self._budget)
        with self._lock:
            self._internal[name] = tuple(kept)
            record = self._internal_drops.setdefault(name, SourceRecord(name))
            went, back = record.count_dropped(dropped)
            self._bump()
        self._note_budget(name, went, back, dropped)

    def records(self) -> list[SourceRecordView]:
        """Copies of every source record, for /status and checks."""
        with self._lock:
            return [record.copy() for record in self._records.values()]

    def view(self) -> View:
        """The current view; rebuilt only when the data or the set of fresh sources changed."""
        now = self._mono()
        with self._lock:
            # The key is cheap on purpose: every scrape computes it.
            key = (self._generation, tuple(_fresh(r.snapshot, now) for r in self._records.values()))
            cached = self._view
            if cached is not None and cached.key == key:
                return cached
            records = [record.copy() for record in self._records.values()]
            internal = list(self._internal.items())
            drops = [
                (name, tuple(sorted(r.dropped.items())))
                for name, r in self._internal_drops.items()
                if r.dropped
            ]
        parts: list[tuple[str, Sequence[Reading]]] = [
            (SELF_SOURCE, (*_self_readings(records, now), *_dropped_readings(records, drops))),
            *internal,
            *(
                (record.name, record.snapshot.readings)
                for record in records
                if record.snapshot is not None and record.fresh(now)
            ),
        ]
        fresh = [r.snapshot for r in records if r.snapshot is not None and r.fresh(now)]
        view = View(
            key,
            (r for _, items in parts for r in items),
            parts,
            (v for snap in fresh for v in snap.health),
        )
        with self._lock:
            self._view = view
        return view


Drops = tuple[tuple[str, int], ...]


def _dropped_readings(
    records: Sequence[SourceRecordView], published: Sequence[tuple[str, Drops]]
) -> Iterable[Reading]:
    """``accel_exporter_series_dropped_total`` of every source that ever went over budget."""
    for name, dropped in (*((r.name, r.dropped) for r in records), *published):
        for family, count in dropped:
            yield Reading(ACCEL_EXPORTER_SERIES_DROPPED_TOTAL, (name, family), float(count))


def _self_readings(records: Sequence[SourceRecordView], now: float) -> Iterable[Reading]:
    yield Reading(ACCEL_EXPORTER_BUILD_INFO, (__version__, platform.python_version()), 1.0)
    for record in records:
        name = (record.name,)
        yield Reading(ACCEL_EXPORTER_WORKER_RESTARTS_TOTAL, name, float(record.restarts))
        for reason, count in record.errors:
            yield Reading(ACCEL_EXPORTER_SOURCE_ERRORS_TOTAL, (record.name, reason), float(count))
        if record.unavailable is not None:
            yield Reading(
                ACCEL_EXPORTER_SOURCE_UNAVAILABLE_INFO, (record.name, record.unavailable), 1.0
            )
            continue
        if record.snapshot is None:
            continue
        reason = record.down_reason(now)
        yield Reading(ACCEL_EXPORTER_SOURCE_UP, name, 0.0 if reason else 1.0)
        if reason:
            yield Reading(ACCEL_EXPORTER_SOURCE_DOWN_REASON_INFO, (record.name, reason), 1.0)
        yield Reading(ACCEL_EXPORTER_SOURCE_POLL_DURATION_SECONDS, name, record.durations)
        if record.last_success is not None:
            yield Reading(
                ACCEL_EXPORTER_SOURCE_LAST_SUCCESS_TIMESTAMP_SECONDS, name, record.last_success
            )


# Set to 1 by the test suite: a label value outside its enumeration raises.
STRICT_ENV = "ACCEL_STRICT_LABEL_VALUES"
# (family, label, value) already reported; bounded, so that a source spraying
# free text cannot grow it without end (past the bound, drops are silent).
_REPORTED: set[tuple[str, str, str]] = set()
_REPORTED_MAX = 1024


class LabelValueError(ValueError):
    """A label value outside its catalog row's enumeration, in strict mode."""


def strict_values() -> bool:
    """Whether label values outside their enumeration raise (the test suite) or are dropped."""
    return os.environ.get(STRICT_ENV) == "1"


def validate(
    readings: Iterable[Reading],
    catalog: Mapping[str, MetricSpec] = CATALOG,
    *,
    strict: bool | None = None,
) -> tuple[list[Reading], list[str]]:
    """Split readings into those that match the catalog and descriptions of the rest.

    A label value outside its enumeration is described only the first time it is
    seen in this process (the caller logs the descriptions); with ``strict``
    (default: :func:`strict_values`) it raises :class:`LabelValueError` instead.
    """
    if strict is None:
        strict = strict_values()
    good: list[Reading] = []
    bad: list[str] = []
    for reading in readings:
        row = catalog.get(reading.metric)
        if row is None:
            bad.append(f"{reading.metric}: not in the catalog")
        elif len(reading.labels) != len(row.labels):
            bad.append(
                f"{reading.metric}: {len(reading.labels)} label values for {len(row.labels)} labels"
            )
        elif (row.kind is Kind.HISTOGRAM) != isinstance(reading.value, HistogramValue):
            bad.append(f"{reading.metric}: value does not match kind {row.kind.value}")
        elif not all(isinstance(v, str) for v in reading.labels):
            bad.append(f"{reading.metric}: label values must be strings")
        elif not isinstance(reading.value, HistogramValue) and not is_number(reading.value):
            bad.append(
                f"{reading.metric}{list(reading.labels)}: value {reading.value!r} is not finite"
            )
        else:
            # Inline, not a helper: this runs for every reading of every poll.
            for position, allowed in row.enumerated:
                if reading.labels[position] not in allowed:
                    _unlisted(reading, row, position, strict, bad)
                    break
            else:
                good.append(reading)
    return good, bad


def _unlisted(
    reading: Reading, row: MetricSpec, position: int, strict: bool, bad: list[str]
) -> None:
    """A label value outside its enumeration: raise (strict) or describe it the first time."""
    label, value = row.labels[position], reading.labels[position]
    listed = ", ".join(map(repr, row.values[label]))
    text = f"{reading.metric}: {label}={value!r} is not one of {listed}"
    if strict:
        raise LabelValueError(text)
    key = (reading.metric, label, value)
    if key not in _REPORTED and len(_REPORTED) < _REPORTED_MAX:
        _REPORTED.add(key)
        bad.append(text + " (dropped; reported once)")
