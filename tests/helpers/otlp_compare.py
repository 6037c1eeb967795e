"""Put an OTLP request and a /metrics exposition side by side, series by series.

Both are reduced to ``{(otel name, sorted attributes): value}``: the request by
decoding its data points, the exposition by mapping each Prometheus sample
through the catalog's OTel mapping (the documented table). Histograms become
``(bounds, per-bucket counts, sum, count)``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter.catalog import CATALOG, Kind
from exporter.catalog.otel import METRICS, Instrument

Key = tuple[str, tuple[tuple[str, str], ...]]
_BY_FAMILY = {spec.family_name: name for name, spec in CATALOG.items()}


def _any(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _any(kv.value) for kv in items}


def resource(request: Any) -> dict[str, Any]:
    (resource_metrics,) = request.resource_metrics
    return attributes(resource_metrics.resource.attributes)


def points(request: Any) -> tuple[dict[Key, Any], dict[str, tuple[str, str, bool | None, int]]]:
    """Values by series, and per metric (data kind, unit, monotonic, temporality)."""
    values: dict[Key, Any] = {}
    shapes: dict[str, tuple[str, str, bool | None, int]] = {}
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                shapes[metric.name] = (
                    kind,
                    metric.unit,
                    data.is_monotonic if kind == "sum" else None,
                    getattr(data, "aggregation_temporality", 0),
                )
                for point in data.data_points:
                    key = (metric.name, tuple(sorted(attributes(point.attributes).items())))
                    assert key not in values, f"duplicate series {key}"
                    if kind == "histogram":
                        values[key] = (
                            tuple(point.explicit_bounds),
                            tuple(point.bucket_counts),
                            point.sum,
                            point.count,
                        )
                    else:
                        kind_value = point.WhichOneof("value")
                        values[key] = float(getattr(point, kind_value))
    return values, shapes


def expected(text: str) -> dict[Key, Any]:
    """The OTLP series /metrics promises, through the catalog's OTel mapping."""
    out: dict[Key, Any] = {}
    histograms: dict[Key, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        name = _BY_FAMILY.get(family.name)
        if name is None:
            continue  # process_* and other non-catalog families
        if family.name == "accel_exporter_series":
            continue  # counts the scrape's own body: written by the Prometheus render only
        mapping = METRICS[name]
        spec = mapping.row
        for sample in family.samples:
            labels = tuple(sample.labels[label] for label in spec.labels)
            key = (mapping.name, tuple(sorted(mapping.attributes(labels).items())))
            if spec.kind is not Kind.HISTOGRAM:
                out[key] = float(sample.value)
                continue
            entry = histograms.setdefault(key, {"buckets": {}})
            if sample.name.endswith("_bucket"):
                entry["buckets"][float(sample.labels["le"])] = int(sample.value)
            elif sample.name.endswith("_sum"):
                entry["sum"] = float(sample.value)
            elif sample.name.endswith("_count"):
                entry["count"] = int(sample.value)
    for key, entry in histograms.items():
        bounds = sorted(b for b in entry["buckets"] if b != float("inf"))
        cumulative = [entry["buckets"][b] for b in bounds] + [entry["buckets"][float("inf")]]
        per_bucket = [c - p for c, p in zip(cumulative, [0, *cumulative[:-1]], strict=True)]
        out[key] = (tuple(bounds), tuple(per_bucket), entry["sum"], entry["count"])
    return out


EXPECTED_KIND = {
    Instrument.GAUGE: ("gauge", None),
    Instrument.COUNTER: ("sum", True),
    Instrument.UPDOWNCOUNTER: ("sum", False),
    Instrument.HISTOGRAM: ("histogram", None),
}
