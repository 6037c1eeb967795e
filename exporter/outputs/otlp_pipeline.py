"""The OpenTelemetry SDK side of the OTLP output: instruments that read store views.

One :class:`Pipeline` owns a ``MeterProvider`` (with the daemon's ``Resource``)
and one observable instrument per OTel name of the store's catalog
(:func:`exporter.catalog.otel.instruments`): observable gauges, counters and
up-down counters whose callbacks read the same :class:`~exporter.store.View`
that /metrics renders. :meth:`Pipeline.collect` pins one view for the whole
pass, so every instrument of one export sees the same snapshot: one code path
for the data, two encodings.

Histograms: the store already holds cumulative ``HistogramValue`` readings, and
the SDK has no observable histogram (a synchronous one would re-aggregate
observations we do not have). They are bridged instead: the pass turns each
reading into an OTLP ``HistogramDataPoint`` with the catalog's explicit bounds,
per-bucket counts and sum, and appends it to the SDK's batch in the same scope.
Start times follow the SDK's rule for asynchronous instruments.

Counter resets under cumulative temporality: the SDK keeps one start time per
series for its whole life, so a counter that went down (a job restart, a
driver reload) would be sent as a monotonic sum that decreases under the same
start time, which the OTLP data model forbids. A series whose value went down
gets a new start time - its previous point's time - from then on, as the
histogram bridge does for a histogram that went back.

Delta temporality: the SDK converts cumulative observations to deltas by
subtraction, which turns a counter reset (a driver reload) into a negative
delta and the first observation into one huge delta. Counter values are
therefore re-based first: series present at the first pass start at zero, a
reset continues from where the series was. Histograms get the same rules.

The SDK keeps state for every attribute set it has ever seen (label churn, e.g.
pids, would grow it without bound and eventually overflow its cardinality
limit), so :attr:`Pipeline.worn_out` tells the owner to build a fresh pipeline
once the dead series outnumber the live ones.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import (
    AlwaysOffExemplarFilter,
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
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
from exporter.store import View

SCOPE = "accel-exporter"
# Far above any real per-instrument series count; worn-out pipelines are rebuilt long before.
CARDINALITY_LIMIT = 100_000
# Rebuild once this many series (and more than are alive) have gone away.
STALE_SERIES_BUDGET = 1000

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
_CUMULATIVE = AggregationTemporality.CUMULATIVE
_DELTA = AggregationTemporality.DELTA


def preferences(temporality: str) -> dict[type, AggregationTemporality]:
    """Temporality per instrument class for the spec's cumulative / delta / lowmemory."""
    prefs: dict[type, AggregationTemporality] = {
        cls: _CUMULATIVE
        for cls in (
            Counter,
            UpDownCounter,
            Histogram,
            ObservableCounter,
            ObservableUpDownCounter,
            ObservableGauge,
        )
    }
    if temporality in ("delta", "lowmemory"):
        prefs[Counter] = prefs[Histogram] = _DELTA
    if temporality == "delta":
        prefs[ObservableCounter] = _DELTA
    return prefs


class _HandOffReader(MetricReader):
    """A reader that collects only when asked and hands the batch back to the caller."""

    def __init__(self, temporality: dict[type, AggregationTemporality]) -> None:
        limits: Any = {
            ObservableGauge: CARDINALITY_LIMIT,
            ObservableCounter: CARDINALITY_LIMIT,
            ObservableUpDownCounter: CARDINALITY_LIMIT,
        }
        super().__init__(preferred_temporality=temporality, cardinality_limits=limits)
        self._batch: MetricsData | None = None

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        self._batch = metrics_data

    def take(self, timeout_millis: float) -> MetricsData | None:
        """Run the callbacks and return what the SDK aggregated."""
        self.collect(timeout_millis=timeout_millis)
        batch, self._batch = self._batch, None
        return batch

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing runs in the background."""


class _CounterBase:
    """Re-bases external cumulative counters for delta export (see the module doc)."""

    def __init__(self) -> None:
        self._state: dict[SeriesKey, tuple[float, float]] = {}  # key -> (offset, last raw)

    def value(self, key: SeriesKey, raw: float, first_pass: bool) -> float:
        """The zero-based, never-decreasing value to report for ``raw``."""
        state = self._state.get(key)
        if state is None:
            # Present at the first pass: its history is unknown, so it starts at zero.
            # Born later: all of it happened since the previous pass.
            offset = -raw if first_pass else 0.0
        else:
            offset, last = state
            if raw < last:
                offset += last
        self._state[key] = (offset, raw)
        return raw + offset


class _ResetStarts:
    """New start times for cumulative monotonic sums whose value went down (see the module doc)."""

    def __init__(self) -> None:
        # key -> (start since the last reset, None for the SDK's own; last value; its time)
        self._series: dict[SeriesKey, tuple[int | None, float, int]] = {}

    def apply(self, metric: Metric) -> Metric:
        """``metric`` with the start times of reset series replaced."""
        data = metric.data
        if (
            not isinstance(data, Sum)
            or not data.is_monotonic
            or data.aggregation_temporality is not _CUMULATIVE
        ):
            return metric
        points = []
        changed = False
        for point in data.data_points:
            # Our attribute values are always strings (catalog label values).
            attributes = {k: str(v) for k, v in (point.attributes or {}).items()}
            key: SeriesKey = (metric.name, tuple(sorted(attributes.items())))
            start: int | None = None
            known = self._series.get(key)
            if known is not None:
                start, last, last_ns = known
                if point.value < last:
                    # The reset happened after the previous point: the new series starts there.
                    start = last_ns
            self._series[key] = (start, point.value, point.time_unix_nano)
            if start is not None:
                point = dataclasses.replace(point, start_time_unix_nano=start)
                changed = True
            points.append(point)
        if not changed:
            return metric
        return dataclasses.replace(metric, data=dataclasses.replace(data, data_points=points))


@dataclass
class _HistogramSeries:
    start_ns: int
    last: HistogramValue


def _buckets(value: HistogramValue) -> list[int]:
    """Per-bucket counts from cumulative ones (OTLP wants them non-cumulative)."""
    out = []
    previous = 0
    for count in value.counts:
        out.append(count - previous)
        previous = count
    return out


def _went_back(before: HistogramValue, now: HistogramValue) -> bool:
    """A reset: other bounds, or any bucket holding fewer observations than before."""
    return before.bounds != now.bounds or any(
        b > n for b, n in zip(_buckets(before), _buckets(now), strict=True)
    )


class HistogramBridge:
    """One catalog histogram family exported from the store's cumulative state."""

    def __init__(self, metric: OtelMetric, delta: bool) -> None:
        self.metric = metric
        self.delta = delta
        self._series: dict[SeriesKey, _HistogramSeries] = {}

    def collect(
        self,
        view: View,
        now_ns: int,
        since_ns: int,
        first_pass: bool,
        seen: Callable[[SeriesKey], None],
    ) -> Metric | None:
        """The OTLP metric for this pass, or None when the family has no readings.

        ``since_ns`` is the previous pass (or the pipeline's birth before the first).
        """
        points = []
        for reading in view.readings(self.metric.row.name):
            current = reading.value
            if not isinstance(current, HistogramValue):
                continue
            attributes = self.metric.attributes(reading.labels)
            key: SeriesKey = (self.metric.name, tuple(sorted(attributes.items())))
            seen(key)
            series = self._series.get(key)
            base: HistogramValue | None = None
            if series is None:
                series = self._series[key] = _HistogramSeries(since_ns, current)
                if first_pass:
                    base = current  # history unknown: deltas start here
            elif _went_back(series.last, current):
                series.start_ns = since_ns
            else:
                base = series.last
            series.last = current
            value, start = current, series.start_ns
            if self.delta:
                start = since_ns
                if base is not None:
                    value = HistogramValue(
                        current.bounds,
                        tuple(n - b for n, b in zip(current.counts, base.counts, strict=True)),
                        current.total - base.total,
                    )
            points.append(
                HistogramDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=start,
                    time_unix_nano=now_ns,
                    count=value.count,
                    sum=value.total,
                    bucket_counts=_buckets(value),
                    explicit_bounds=list(value.bounds),
                    # Prometheus histograms have no min and max; OTLP makes them optional.
                    min=None,  # type: ignore[arg-type]
                    max=None,  # type: ignore[arg-type]
                )
            )
        if not points:
            return None
        temporality = _DELTA if self.delta else _CUMULATIVE
        return Metric(
            name=self.metric.name,
            description=self.metric.description,
            unit=self.metric.unit,
            data=HistogramData(data_points=points, aggregation_temporality=temporality),
        )


class Pipeline:
    """MeterProvider + catalog instruments + the histogram bridges; one collect per export."""

    def __init__(
        self, resource: Resource, temporality: str, catalog: Mapping[str, MetricSpec] = CATALOG
    ) -> None:
        prefs = preferences(temporality)
        self._reader = _HandOffReader(prefs)
        self._resource = resource
        self._provider = MeterProvider(
            metric_readers=[self._reader],
            resource=resource,
            exemplar_filter=AlwaysOffExemplarFilter(),
            shutdown_on_exit=False,
        )
        meter = self._provider.get_meter(SCOPE, __version__)
        self._scope = InstrumentationScope(SCOPE, __version__)
        self._view: View | None = None
        self._first_pass = True
        self._since_ns = time.time_ns()
        self._seen: set[SeriesKey] = set()
        self._live = 0
        self._base = _CounterBase()
        self._resets = _ResetStarts()
        self._bridges: list[HistogramBridge] = []
        for name, members in instruments(catalog).items():
            head = members[0]
            if head.instrument is Instrument.HISTOGRAM:
                self._bridges.append(HistogramBridge(head, prefs[Histogram] is _DELTA))
                continue
            rebase = head.instrument is Instrument.COUNTER and prefs[ObservableCounter] is _DELTA
            callback = self._callback(members, rebase)
            create = {
                Instrument.GAUGE: meter.create_observable_gauge,
                Instrument.COUNTER: meter.create_observable_counter,
                Instrument.UPDOWNCOUNTER: meter.create_observable_up_down_counter,
            }[head.instrument]
            create(name, callbacks=[callback], unit=head.unit, description=head.description)

    def _mark(self, key: SeriesKey) -> None:
        self._seen.add(key)
        self._live += 1

    def _callback(
        self, members: Sequence[OtelMetric], rebase: bool
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            view = self._view
            if view is None:  # only a pass may collect; anything else sees nothing
                return []
            out = []
            for member in members:
                for reading in view.readings(member.row.name):
                    value = reading.value
                    if isinstance(value, HistogramValue):
                        continue
                    attributes = member.attributes(reading.labels)
                    key: SeriesKey = (member.name, tuple(sorted(attributes.items())))
                    self._mark(key)
                    if rebase:
                        value = self._base.value(key, value, self._first_pass)
                    out.append(Observation(value, attributes))
            return out

        return observe

    @property
    def worn_out(self) -> bool:
        """True when series that went away outnumber the budget and the live ones."""
        stale = len(self._seen) - self._live
        return stale > max(STALE_SERIES_BUDGET, self._live)

    def collect(self, view: View, timeout: float) -> MetricsData:
        """One export batch for ``view``: SDK instruments plus bridged histograms."""
        now_ns = time.time_ns()
        self._view = view
        self._live = 0
        try:
            batch = self._reader.take(timeout * 1000.0)
            extra = [
                metric
                for bridge in self._bridges
                if (
                    metric := bridge.collect(
                        view, now_ns, self._since_ns, self._first_pass, self._mark
                    )
                )
            ]
        finally:
            self._view = None
            self._first_pass = False
            self._since_ns = now_ns
        return self._merge(batch, extra)

    def _merge(self, batch: MetricsData | None, extra: list[Metric]) -> MetricsData:
        scopes: list[ScopeMetrics] = []
        for resource_metrics in batch.resource_metrics if batch is not None else ():
            for scope in resource_metrics.scope_metrics:
                metrics = [self._resets.apply(m) for m in scope.metrics]
                scopes.append(ScopeMetrics(scope.scope, metrics, scope.schema_url))
        if extra:
            for i, scope in enumerate(scopes):
                if scope.scope.name == SCOPE:
                    scopes[i] = ScopeMetrics(
                        scope.scope, [*scope.metrics, *extra], scope.schema_url
                    )
                    break
            else:
                scopes.append(ScopeMetrics(self._scope, extra, ""))
        return MetricsData(resource_metrics=[ResourceMetrics(self._resource, scopes, "")])

    def shutdown(self) -> None:
        """Release the provider (it has no thread or connection of its own)."""
        self._provider.shutdown(timeout_millis=1000)
