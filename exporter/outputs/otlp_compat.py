"""Compat families (dcgm-exporter's, AMD's) as OTLP metrics, as /metrics serves them.

Neither peer pushes OTLP (dcgm-exporter 4.10 serves /metrics only, its OTLP pull
request NVIDIA/dcgm-exporter#673 is documentation only; AMD's device-metrics-exporter
serves /metrics only, OpenTelemetry being an indirect Go dependency of it), so there is
no peer mapping to match: a compat family keeps its
Prometheus name, help and labels (as data point attributes), a gauge is a Gauge and a
counter a monotonic Sum, with no unit (the peers declare none). An OTLP pipeline that
scrapes the peer with the collector's Prometheus receiver gets the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    NumberDataPoint,
    Sum,
)

from exporter.outputs.compat import Family

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
# (series key, value, now, delta) -> (start time, value to send): the builder's tracking.
Track = Callable[[SeriesKey, float, int, bool], tuple[int, float]]


def metrics(families: Iterable[Family], now: int, track: Track, delta: bool) -> list[Metric]:
    """One OTLP metric per compat family with samples."""
    out = []
    for family in families:
        if not family.samples:
            continue
        counter = family.kind == "counter"
        points: list[NumberDataPoint] = []
        for labels, value in family.samples:
            attributes = dict(labels)
            if not counter:
                points.append(NumberDataPoint(attributes, None, now, value))  # type: ignore[arg-type]
                continue
            key: SeriesKey = ("compat:" + family.name, tuple(sorted(attributes.items())))
            start, sent = track(key, value, now, delta)
            points.append(NumberDataPoint(attributes, start, now, sent))
        data: Gauge | Sum
        if counter:
            temporality = (
                AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
            )
            data = Sum(points, temporality, is_monotonic=True)
        else:
            data = Gauge(points)
        out.append(Metric(family.name, family.help, "", data))
    return out
