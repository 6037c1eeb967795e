"""OTLP export batches built straight from a store view.

The store already holds what the exporter means to say: gauge values,
cumulative counters and cumulative histograms, polled by the sources. So a
batch is a translation, not an aggregation: every reading of a catalog family
becomes one data point of its OpenTelemetry instrument
(:func:`exporter.catalog.otel.instruments`), stamped with the pass's time. The
SDK's ``MeterProvider`` would aggregate observations we already aggregated and
keep state for every attribute set it ever saw; here the only state is one
:class:`_Series` per live series, its start time and its last value.

Start times (cumulative sums and histograms): a series present at the first
pass starts when the builder was made (its history before is unknown); one
born later, or one whose value went back (a driver reload, a job restart),
starts at the previous pass, since the OTLP data model forbids a monotonic sum
that decreases under the same start time.

Delta temporality (counters under ``delta``; histograms under ``delta`` and
``lowmemory``, as the spec's presets say for asynchronous counters and
histograms): the point is the increase since the previous pass. A series
present at the first pass starts at zero; one born later counts all of its
value (it all happened since); after a reset the new value is the increase.
Up-down counters and gauges are never deltas.

A series that vanished (a source that missed a poll, a process that ended)
keeps its state for :data:`FORGET_AFTER_SECONDS`, so a brief gap neither
restarts its cumulative start time nor turns its whole count into one delta.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from exporter import __version__
from exporter.catalog import CATALOG, MetricSpec
from exporter.catalog.otel import Instrument, OtelMetric, instruments
from exporter.model import HistogramValue
from exporter.outputs import otlp_compat
from exporter.outputs.compat import Compat
from exporter.outputs.profile import Profile
from exporter.outputs.stamp import StampFactory, Stamping, stamps
from exporter.store import View

SCOPE = "accel-exporter"
# How long a series that went away is remembered (its start time, its last value).
FORGET_AFTER_SECONDS = 3600.0
TEMPORALITIES = ("cumulative", "delta", "lowmemory")

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
_CUMULATIVE = AggregationTemporality.CUMULATIVE
_DELTA = AggregationTemporality.DELTA


@dataclass
class _Series:
    """What one series needs from pass to pass."""

    start_ns: int
    last: float | HistogramValue
    seen_ns: int


def _buckets(value: HistogramValue) -> list[int]:
    """Per-bucket counts from cumulative ones (OTLP wants them non-cumulative)."""
    out = []
    previous = 0
    for count in value.counts:
        out.append(count - previous)
        previous = count
    return out


def _went_back(before: float | HistogramValue, now: float | HistogramValue) -> bool:
    """A reset: a lower value; for a histogram, other bounds or any bucket that lost counts."""
    if isinstance(before, HistogramValue) and isinstance(now, HistogramValue):
        return before.bounds != now.bounds or any(
            b > n for b, n in zip(_buckets(before), _buckets(now), strict=True)
        )
    if isinstance(before, HistogramValue) or isinstance(now, HistogramValue):
        return True
    return now < before


def _minus(now: HistogramValue, base: HistogramValue) -> HistogramValue:
    return HistogramValue(
        now.bounds,
        tuple(n - b for n, b in zip(now.counts, base.counts, strict=True)),
        now.total - base.total,
    )


class BatchBuilder:
    """Turns store views into OTLP batches for one output; one :meth:`build` per export."""

    def __init__(
        self,
        resource: Resource,
        temporality: str = "cumulative",
        catalog: Mapping[str, MetricSpec] = CATALOG,
        profile: Profile | None = None,
        compat: Compat | None = None,
        stamp: StampFactory | None = None,
    ) -> None:
        if temporality not in TEMPORALITIES:
            raise ValueError(f"temporality {temporality!r} is not one of {TEMPORALITIES}")
        self._resource = resource
        self._scope = InstrumentationScope(SCOPE, __version__)
        self._instruments = list(instruments(catalog).items())
        # The families and thinning of ``outputs.otlp.profile`` (every row without one).
        self._profile = profile
        # outputs.prometheus.compat's families, under the peers' names (otlp_compat).
        self._compat = compat
        # outputs.prometheus.workload_labels (or workload.k8s.stamp_device_series): the
        # labels /metrics stamps on device series, as attributes (the non-empty ones).
        self._stamp = stamp
        self._stamping: Stamping | None = None
        self._delta = {
            Instrument.COUNTER: temporality == "delta",
            Instrument.HISTOGRAM: temporality in ("delta", "lowmemory"),
        }
        self._series: dict[SeriesKey, _Series] = {}
        self._since_ns = time.time_ns()
        self._first_pass = True

    def __len__(self) -> int:
        """How many series are tracked (live ones and recently vanished ones)."""
        return len(self._series)

    def build(self, view: View, now_ns: int | None = None) -> MetricsData:
        """The batch for ``view``; ``now_ns`` is its time (now by default)."""
        now = time.time_ns() if now_ns is None else now_ns
        metrics: list[Metric] = []
        self._stamping = self._stamp(view) if self._stamp is not None else None
        try:
            for name, members in self._instruments:
                metric = self._metric(name, members, view, now)
                if metric is not None:
                    metrics.append(metric)
            if self._compat is not None:
                delta = self._delta[Instrument.COUNTER]
                metrics += otlp_compat.metrics(
                    self._compat.families(view), now, self._track_number, delta
                )
        finally:
            self._first_pass = False
            self._since_ns = now
            self._forget(now)
        scope = ScopeMetrics(self._scope, metrics, "")
        return MetricsData([ResourceMetrics(self._resource, [scope], "")])

    def _metric(
        self, name: str, members: tuple[OtelMetric, ...], view: View, now: int
    ) -> Metric | None:
        head = members[0]
        kind = head.instrument
        delta = self._delta.get(kind, False)
        points: list[NumberDataPoint | HistogramDataPoint] = []
        stamping = self._stamping
        for member in members:
            stamped = stamping is not None and stamps(stamping, member.row)
            found = (
                view.readings(member.row.name)
                if self._profile is None
                else self._profile.readings(view, member.row.name)
            )
            for reading in found:
                value = reading.value
                if isinstance(value, HistogramValue) is not (kind is Instrument.HISTOGRAM):
                    continue  # a reading of the wrong shape is /metrics' business, not ours
                attributes = member.attributes(reading.labels)
                if stamped:
                    assert stamping is not None
                    attributes.update(stamping.extra(reading.labels[1]))
                key: SeriesKey = (name, tuple(sorted(attributes.items())))
                if kind is Instrument.GAUGE:
                    # Gauges have no start time (the SDK leaves it unset too).
                    points.append(NumberDataPoint(attributes, None, now, value))  # type: ignore[arg-type]
                    continue
                start, point_value = self._track(key, value, now, delta)
                if isinstance(point_value, HistogramValue):
                    points.append(
                        HistogramDataPoint(
                            attributes=attributes,
                            start_time_unix_nano=start,
                            time_unix_nano=now,
                            count=point_value.count,
                            sum=point_value.total,
                            bucket_counts=_buckets(point_value),
                            explicit_bounds=list(point_value.bounds),
                            # Prometheus histograms have no min and max; OTLP makes them optional.
                            min=None,  # type: ignore[arg-type]
                            max=None,  # type: ignore[arg-type]
                        )
                    )
                else:
                    points.append(NumberDataPoint(attributes, start, now, point_value))
        if not points:
            return None
        temporality = _DELTA if delta else _CUMULATIVE
        data: Gauge | Sum | HistogramData
        if kind is Instrument.GAUGE:
            data = Gauge(points)  # type: ignore[arg-type]
        elif kind is Instrument.HISTOGRAM:
            data = HistogramData(points, temporality)  # type: ignore[arg-type]
        else:
            data = Sum(points, temporality, is_monotonic=kind is Instrument.COUNTER)  # type: ignore[arg-type]
        return Metric(name, head.description, head.unit, data)

    def _track(
        self, key: SeriesKey, value: float | HistogramValue, now: int, delta: bool
    ) -> tuple[int, float | HistogramValue]:
        """(start time, value to send) for one cumulative reading; updates the series."""
        series = self._series.get(key)
        base: float | HistogramValue | None = None
        if series is None:
            # Present at the first pass: history unknown, it starts with the builder
            # (a delta of zero). Born later: all of it happened since the previous pass.
            series = self._series[key] = _Series(self._since_ns, value, now)
            if self._first_pass:
                base = value
        elif _went_back(series.last, value):
            series.start_ns = self._since_ns
        else:
            base = series.last
        series.last, series.seen_ns = value, now
        if not delta:
            return series.start_ns, value
        if base is None:
            return self._since_ns, value
        if isinstance(value, HistogramValue):
            assert isinstance(base, HistogramValue)
            return self._since_ns, _minus(value, base)
        assert not isinstance(base, HistogramValue)
        return self._since_ns, value - base

    def _track_number(
        self, key: SeriesKey, value: float, now: int, delta: bool
    ) -> tuple[int, float]:
        start, sent = self._track(key, value, now, delta)
        assert not isinstance(sent, HistogramValue)
        return start, sent

    def _forget(self, now: int) -> None:
        horizon = now - int(FORGET_AFTER_SECONDS * 1e9)
        gone = [key for key, series in self._series.items() if series.seen_ns < horizon]
        for key in gone:
            del self._series[key]
