"""The exposition text of catalog families, written straight from store readings.

prometheus_client's encoders take ``Metric`` objects: every sample becomes a
``Sample`` with a label dict, then a line. For a 16-GPU node (4,000 samples)
building and encoding those objects cost about 30 ms of CPU per render, half
the daemon's idle CPU under a 5 s scrape and more than the whole of
nvitop-exporter's (bench/idle.py). Writing the lines from the readings directly
costs a fraction of that. The output is byte for byte what prometheus_client
writes for the same families, in the 0.0.4 text format and in OpenMetrics
(tests/unit/test_text_format.py compares them on the whole catalog); for any
other escaping scheme the caller uses prometheus_client itself
(:func:`fast_format`).

Families come from prometheus_client's own constructors (one per family, not
per sample), so names, ``_total`` handling, units and types are its rules.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import exposition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.utils import floatToGoString as _go_float

from exporter.catalog import Kind, MetricSpec
from exporter.model import HistogramValue, Reading

TEXT, OPENMETRICS = "text", "openmetrics"
EOF = b"# EOF\n"
# Names that every escaping scheme leaves as they are (the legacy character set).
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_NEEDS_ESCAPE = re.compile(r'[\\\n"]')
# Escaping schemes under which a legacy name is written unchanged.
_PLAIN_SCHEMES = (openmetrics.UNDERSCORES, openmetrics.ALLOWUTF8)


def fast_format(encoder: Callable[..., bytes]) -> str | None:
    """TEXT or OPENMETRICS when this module writes what ``encoder`` would; else None.

    ``encoder`` is what ``choose_encoder`` gave; None means another escaping scheme.
    """
    func, escaping = encoder, openmetrics.UNDERSCORES
    if isinstance(encoder, functools.partial):
        func, escaping = encoder.func, encoder.keywords.get("escaping", escaping)
    if escaping not in _PLAIN_SCHEMES:
        return None
    if func is exposition.generate_latest:
        return TEXT
    if func is openmetrics.generate_latest:
        return OPENMETRICS
    return None


def _float(value: float) -> str:
    """The library's number format (Go's), typed for our callers."""
    text: str = _go_float(value)  # type: ignore[no-untyped-call]
    return text


def _label_value(value: str) -> str:
    if _NEEDS_ESCAPE.search(value) is None:
        return value
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


@dataclass(frozen=True)
class _Shape:
    """What every line of one family shares, in one format."""

    header: str
    sample: str  # the sample name (counters: ..._total; histograms: the base name)
    histogram: bool
    # Label positions in the order they are written (sorted by name), and their names.
    order: tuple[int, ...]
    names: tuple[str, ...]
    # Histograms: where "le" goes among the sorted names.
    le_at: int


def _prototype(spec: MetricSpec) -> Metric:
    labels = list(spec.labels)
    if spec.kind is Kind.COUNTER:
        return CounterMetricFamily(spec.family_name, spec.help, labels=labels, unit=spec.unit)
    if spec.kind is Kind.HISTOGRAM:
        return HistogramMetricFamily(spec.name, spec.help, labels=labels, unit=spec.unit)
    return GaugeMetricFamily(spec.name, spec.help, labels=labels, unit=spec.unit)


@functools.lru_cache(maxsize=4096)
def _shape(spec: MetricSpec, fmt: str) -> _Shape | None:
    """The family's shared parts; None when a name needs escaping (left to the library)."""
    metric = _prototype(spec)
    if not _METRIC_NAME.match(metric.name) or ":" in metric.name:
        return None
    if not all(_LABEL_NAME.match(label) for label in spec.labels):
        return None
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    if fmt == TEXT:
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        header = f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n"
    else:
        name = metric.name
        header = f"# HELP {name} {doc.replace(chr(34), chr(92) + chr(34))}\n"
        header += f"# TYPE {name} {metric.type}\n"
        if metric.unit:
            header += f"# UNIT {name} {metric.unit}\n"
    sample = metric.name + "_total" if metric.type == "counter" else metric.name
    order = tuple(sorted(range(len(spec.labels)), key=lambda i: spec.labels[i]))
    names = tuple(spec.labels[i] for i in order)
    le_at = sum(1 for label in names if label < "le")
    return _Shape(header, sample, metric.type == "histogram", order, names, le_at)


def _labels(shape: _Shape, values: Sequence[str], le: str | None = None) -> str:
    parts = [f'{shape.names[k]}="{_label_value(values[i])}"' for k, i in enumerate(shape.order)]
    if le is not None:
        parts.insert(shape.le_at, f'le="{le}"')
    return "{" + ",".join(parts) + "}" if parts else ""


def _lines(shape: _Shape, readings: Sequence[Reading], out: list[str]) -> None:
    sample = shape.sample
    if not shape.histogram:
        for reading in readings:
            value = reading.value
            assert not isinstance(value, HistogramValue), reading.metric
            out.append(f"{sample}{_labels(shape, reading.labels)} {_float(value)}\n")
        return
    for reading in readings:
        hist = reading.value
        assert isinstance(hist, HistogramValue), reading.metric
        for bound, count in zip(hist.bounds, hist.counts, strict=False):
            labels = _labels(shape, reading.labels, _bound(bound))
            out.append(f"{sample}_bucket{labels} {_float(count)}\n")
        total = hist.counts[-1]
        out.append(f"{sample}_bucket{_labels(shape, reading.labels, '+Inf')} ")
        out.append(f"{_float(total)}\n")
        if hist.bounds and hist.bounds[0] < 0:
            continue  # as prometheus_client: no count and sum beside negative buckets
        plain = _labels(shape, reading.labels)
        out.append(f"{sample}_count{plain} {_float(total)}\n")
        out.append(f"{sample}_sum{plain} {_float(hist.total)}\n")


def encode(
    rows: Iterable[tuple[MetricSpec, Sequence[Reading]]],
    fmt: str,
    fallback: Callable[[MetricSpec, Sequence[Reading]], bytes],
) -> bytes:
    """The lines of every (row, readings) in ``fmt``, without OpenMetrics' ``# EOF``.

    ``fallback`` encodes a family whose names need escaping (with prometheus_client).
    """
    chunks: list[bytes] = []
    for spec, readings in rows:
        shape = _shape(spec, fmt)
        if shape is None:
            chunks.append(fallback(spec, readings))
            continue
        out = [shape.header]
        _lines(shape, readings, out)
        chunks.append("".join(out).encode())
    return b"".join(chunks)
