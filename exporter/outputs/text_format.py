"""The exposition formats, written straight from store readings; content negotiation.

prometheus_client's encoders take ``Metric`` objects: every sample becomes a
``Sample`` with a label dict, then a line. For a 16-GPU node (4,000 samples)
that cost about 30 ms of CPU per render, more than all of nvitop-exporter's
idle CPU under a 5 s scrape (bench/idle.py), and importing the library pulls
in its push-gateway client (urllib.request, hashlib): 2 MiB of the daemon's
resident memory. This module writes the 0.0.4 text format and OpenMetrics 1.0
itself, byte for byte what prometheus_client writes for the same families
(tests/unit/test_text_format.py compares the two on the whole catalog, for
every Accept header), and negotiates as the library does. The escaping schemes
that rewrite legacy names (``dots``, ``values``) are left to the library
(:mod:`exporter.outputs.prometheus_compat`), imported only when a scraper asks
for one.

Catalog rows always have legacy names (:class:`~exporter.catalog.MetricSpec`
enforces snake_case), which every other scheme writes unchanged.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.catalog import Kind, MetricSpec
from exporter.model import HistogramValue, Reading

TEXT, OPENMETRICS = "text", "openmetrics"
EOF = b"# EOF\n"
CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_TEXT_1 = "text/plain; version=1.0.0; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
UNDERSCORES, ALLOWUTF8 = "underscores", "allow-utf-8"
# Escaping schemes under which a legacy name is written unchanged.
PLAIN_SCHEMES = (UNDERSCORES, ALLOWUTF8)
_NEEDS_ESCAPE = re.compile(r'[\\\n"]')


@dataclass(frozen=True)
class Negotiated:
    """What a scrape gets: a format, its Content-Type, and the escaping scheme it asked for.

    ``fmt`` is None when only prometheus_client can write it (see the module doc).
    """

    fmt: str | None
    content_type: str
    accept: str


def _version(params: Sequence[str]) -> str:
    for param in params:
        key, _, value = param.strip().partition("=")
        if key == "version":
            return value
    return ""


def _escaping(params: Sequence[str]) -> str:
    for param in params:
        key, _, value = param.strip().partition("=")
        if key == "escaping":
            return value
    return UNDERSCORES


def _at_least_1(version: str) -> bool:
    """Whether ``version`` is 1.0.0 or later, compared as prometheus_client does."""
    parts: list[int | str] = []
    for part in version.split("."):
        try:
            parts.append(int(part))
        except ValueError:
            parts.append(part)
    # The library compares the parts with (1, 0, 0); a text part against a number
    # raises, and the caller then answers in the text format (as before this module).
    return tuple(parts) >= (1, 0, 0)


def negotiate(accept: str) -> Negotiated:
    """The format for an Accept header, chosen by prometheus_client's rules.

    The first OpenMetrics entry wins (1.0.0 when it names no version; a version
    below 1.0.0 is skipped); a ``text/plain`` entry with version >= 1.0.0 gets
    the 1.0.0 text content type; anything else the 0.0.4 text format. Raises
    TypeError for a version that cannot be compared (the caller falls back).
    """
    for accepted in (accept or "").split(","):
        parts = accepted.split(";")
        media = parts[0].strip()
        if media == "application/openmetrics-text":
            version, escaping = _version(parts[1:]), _escaping(parts[1:])
            if not version:
                return Negotiated(OPENMETRICS, CONTENT_TYPE_OPENMETRICS, accepted)
            if _at_least_1(version):
                content_type = (
                    f"application/openmetrics-text; version={version}; charset=utf-8; "
                    f"escaping={escaping}"
                )
                fmt = OPENMETRICS if escaping in PLAIN_SCHEMES else None
                return Negotiated(fmt, content_type, accepted)
        elif media == "text/plain":
            version, escaping = _version(parts[1:]), _escaping(parts[1:])
            if version and _at_least_1(version):
                content_type = f"{CONTENT_TYPE_TEXT_1}; escaping={escaping}"
                return Negotiated(
                    TEXT if escaping in PLAIN_SCHEMES else None, content_type, accepted
                )
    return Negotiated(TEXT, CONTENT_TYPE_TEXT, accept)


def negotiate_or_text(accept: str) -> Negotiated:
    """:func:`negotiate`, with the text format for a version that cannot be compared.

    prometheus_client compares a malformed version (``version=x``) as text against
    numbers and raises; such a scraper gets the text format.
    """
    try:
        return negotiate(accept)
    except (TypeError, ValueError):
        return negotiate("")


def go_float(value: float) -> str:
    """A number as Prometheus writes it (Go's formatting: exponents past 1e6, +Inf, NaN)."""
    number = float(value)
    if number == math.inf:
        return "+Inf"
    if number == -math.inf:
        return "-Inf"
    if math.isnan(number):
        return "NaN"
    text = repr(number)
    dot = text.find(".")
    # Go switches to exponents for large numbers sooner than Python's repr.
    if number > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def label_value(value: str) -> str:
    """A label value escaped for both exposition formats."""
    if _NEEDS_ESCAPE.search(value) is None:
        return value
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def le_bound(value: float) -> str:
    """A histogram bucket's upper bound as its ``le`` label value."""
    return "+Inf" if value == math.inf else repr(float(value))


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
    # Label values -> (value, line, where the value starts) of the last render, for
    # non-histogram families: a series keeps its labels from one render to the next,
    # and often its value too, and building the label text and formatting the number
    # are nearly all of a line's cost (docs/http.md: renders of the 16-GPU fake).
    lines: dict[tuple[str, ...], tuple[float, str, int]] = field(
        default_factory=dict, compare=False, hash=False
    )


@functools.lru_cache(maxsize=4096)
def _shape(spec: MetricSpec, fmt: str) -> _Shape:
    """The family's shared parts, named as prometheus_client names them."""
    if spec.kind is Kind.COUNTER:
        name, kind = spec.family_name, "counter"
    elif spec.kind is Kind.HISTOGRAM:
        name, kind = spec.name, "histogram"
    else:
        name, kind = spec.name, "gauge"
    doc = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    if fmt == TEXT:
        shown = name + "_total" if kind == "counter" else name
        header = f"# HELP {shown} {doc}\n# TYPE {shown} {kind}\n"
    else:
        header = f"# HELP {name} {doc.replace(chr(34), chr(92) + chr(34))}\n# TYPE {name} {kind}\n"
        if spec.unit:
            header += f"# UNIT {name} {spec.unit}\n"
    order = tuple(sorted(range(len(spec.labels)), key=lambda i: spec.labels[i]))
    names = tuple(spec.labels[i] for i in order)
    le_at = sum(1 for label in names if label < "le")
    sample = name + "_total" if kind == "counter" else name
    return _Shape(header, sample, kind == "histogram", order, names, le_at)


def _labels(shape: _Shape, values: Sequence[str], le: str | None = None) -> str:
    parts = [f'{shape.names[k]}="{label_value(values[i])}"' for k, i in enumerate(shape.order)]
    if le is not None:
        parts.insert(shape.le_at, f'le="{le}"')
    return "{" + ",".join(parts) + "}" if parts else ""


def _lines(shape: _Shape, readings: Sequence[Reading], out: list[str]) -> None:
    sample = shape.sample
    if not shape.histogram:
        lines = shape.lines
        # Series that come and go (a pod's labels) would grow it without bound:
        # past a few renders' worth it starts again from this one.
        if len(lines) > 4 * len(readings) + 64:
            lines.clear()
        for reading in readings:
            value = reading.value
            assert not isinstance(value, HistogramValue), reading.metric
            labels = reading.labels
            # Popped and put back: the key is then this render's tuple, and the last
            # poll's (with its strings) is not kept alive by the cache.
            last = lines.pop(labels, None)
            # Zero is written again: 0.0 == -0.0, and Go writes "-0".
            if last is not None and last[0] == value and value:
                lines[labels] = last
                out.append(last[1])
                continue
            if last is not None:
                cut = last[2]
                line = f"{last[1][:cut]}{go_float(value)}\n"
            else:
                prefix = f"{sample}{_labels(shape, labels)} "
                cut, line = len(prefix), f"{prefix}{go_float(value)}\n"
            lines[labels] = (value, line, cut)
            out.append(line)
        return
    for reading in readings:
        hist = reading.value
        assert isinstance(hist, HistogramValue), reading.metric
        for bound, count in zip(hist.bounds, hist.counts, strict=False):
            bucket = _labels(shape, reading.labels, le_bound(bound))
            out.append(f"{sample}_bucket{bucket} {go_float(count)}\n")
        total = hist.counts[-1]
        out.append(f"{sample}_bucket{_labels(shape, reading.labels, '+Inf')} {go_float(total)}\n")
        if hist.bounds and hist.bounds[0] < 0:
            continue  # as prometheus_client: no count and sum beside negative buckets
        plain = _labels(shape, reading.labels)
        out.append(f"{sample}_count{plain} {go_float(total)}\n")
        out.append(f"{sample}_sum{plain} {go_float(hist.total)}\n")


def encode(rows: Iterable[tuple[MetricSpec, Sequence[Reading]]], fmt: str) -> bytes:
    """The lines of every (row, readings) in ``fmt``, without OpenMetrics' ``# EOF``."""
    chunks: list[bytes] = []
    for spec, readings in rows:
        shape = _shape(spec, fmt)
        out = [shape.header]
        _lines(shape, readings, out)
        # One family's lines at a time: a 4,000-line body never exists as strings at once.
        chunks.append("".join(out).encode())
    return b"".join(chunks)


# The process families prometheus_client's ProcessCollector exports, same names and help.
_PROCESS = {
    "vmem": MetricSpec("process_virtual_memory_bytes", Kind.GAUGE, "Virtual memory size in bytes."),
    "rss": MetricSpec(
        "process_resident_memory_bytes", Kind.GAUGE, "Resident memory size in bytes."
    ),
    "start": MetricSpec(
        "process_start_time_seconds",
        Kind.GAUGE,
        "Start time of the process since unix epoch in seconds.",
    ),
    "cpu": MetricSpec(
        "process_cpu_seconds_total",
        Kind.COUNTER,
        "Total user and system CPU time spent in seconds.",
    ),
    "open_fds": MetricSpec("process_open_fds", Kind.GAUGE, "Number of open file descriptors."),
    "max_fds": MetricSpec(
        "process_max_fds", Kind.GAUGE, "Maximum number of open file descriptors."
    ),
}


class ProcessFamilies:
    """The daemon's own CPU, memory and file descriptors, as prometheus_client's collector.

    Same families, help and order; read from ``/proc`` (nothing where it is absent).
    """

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._page = float(os.sysconf("SC_PAGE_SIZE"))
        self._btime = 0.0
        try:
            with open(os.path.join(proc, "stat"), "rb") as stat:
                for line in stat:
                    if line.startswith(b"btime "):
                        self._btime = float(line.split()[1])
                        break
        except OSError:
            pass

    def rows(self) -> list[tuple[MetricSpec, Sequence[Reading]]]:
        """The families, each with its one reading."""
        if not self._btime:
            return []
        me = os.path.join(self._proc, str(os.getpid()))
        out: list[tuple[MetricSpec, Sequence[Reading]]] = []

        def add(key: str, value: float) -> None:
            spec = _PROCESS[key]
            out.append((spec, [Reading(spec.name, (), value)]))

        try:
            with open(os.path.join(me, "stat"), "rb") as stat:
                parts = stat.read().split(b")")[-1].split()
            add("vmem", float(parts[20]))
            add("rss", float(parts[21]) * self._page)
            add("start", float(parts[19]) / self._ticks + self._btime)
            add("cpu", (float(parts[11]) + float(parts[12])) / self._ticks)
        except OSError:
            pass
        try:
            max_fds = None
            with open(os.path.join(me, "limits"), "rb") as limits:
                for line in limits:
                    if line.startswith(b"Max open file"):
                        max_fds = float(line.split()[3])
                        break
            open_fds = float(len(os.listdir(os.path.join(me, "fd"))))
            add("open_fds", open_fds)
            if max_fds is not None:
                add("max_fds", max_fds)
        except OSError:
            pass
        return out
