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
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import cast

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


@dataclass(eq=False)
class _Last:
    """Where a family's series went in the last body it was rendered into.

    Series ``i`` of that render had labels ``keys[i]`` and value ``values[i]`` (the
    values packed as doubles: compared bit for bit, as Go writes 0 and -0 apart);
    the family's lines follow each other from ``body[base]``, line ``i`` being
    ``lengths[i]`` bytes, its value starting ``cuts[i]`` bytes in. The body is the
    one the exposition caches and serves anyway, so the cache costs a pointer and
    16 bytes a series rather than a string of its own (an idle 16-GPU node in the
    ``full`` profile: about 0.2 MiB where a line apiece took 1.2).
    """

    body: bytes
    base: int
    keys: list[tuple[str, ...]]
    values: bytes
    lengths: array[int]
    cuts: array[int]


@dataclass(frozen=True)
class _Shape:
    """What every line of one family shares, in one format."""

    header: bytes
    sample: str  # the sample name (counters: ..._total; histograms: the base name)
    histogram: bool
    # Label positions in the order they are written (sorted by name), and their names.
    order: tuple[int, ...]
    names: tuple[str, ...]
    # Histograms: where "le" goes among the sorted names.
    le_at: int
    # Non-histogram families: the last render's lines (_Last), replaced whole after
    # each render. A series keeps its labels from one render to the next, and often
    # its value too, and building the label text and formatting the number are
    # nearly all of a line's cost (docs/http.md: renders of the 16-GPU fake).
    last: list[_Last | None] = field(default_factory=lambda: [None], compare=False, hash=False)


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
    return _Shape(header.encode(), sample, kind == "histogram", order, names, le_at)


def _labels(shape: _Shape, values: Sequence[str], le: str | None = None) -> str:
    parts = [f'{shape.names[k]}="{label_value(values[i])}"' for k, i in enumerate(shape.order)]
    if le is not None:
        parts.insert(shape.le_at, f'le="{le}"')
    return "{" + ",".join(parts) + "}" if parts else ""


class Body:
    """One exposition body being written: families, then raw bytes, then :meth:`finish`.

    Families' series lines are taken from the last body they were written into
    where labels and value hold (a run of such lines is one slice), so at idle
    most of a render is copying; :meth:`finish` joins the parts and records where
    each family's lines landed, for the next render.
    """

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._parts: list[bytes] = []
        self._size = 0
        self._made: list[tuple[_Shape, _Last]] = []

    def raw(self, data: bytes) -> None:
        """Append bytes written elsewhere (the compat families)."""
        if data:
            self._parts.append(data)
            self._size += len(data)

    def families(self, rows: Iterable[tuple[MetricSpec, Sequence[Reading]]]) -> None:
        """Append every (row, readings) as one family each."""
        for spec, readings in rows:
            shape = _shape(spec, self.fmt)
            self.raw(shape.header)
            if shape.histogram:
                out: list[str] = []
                _histogram_lines(shape, readings, out)
                self.raw("".join(out).encode())
            elif readings:
                self._series(shape, readings)

    def _series(self, shape: _Shape, readings: Sequence[Reading]) -> None:
        keys = [r.labels for r in readings]
        # A histogram's value among them fails here, in array(): not a number.
        numbers = cast("list[float]", [r.value for r in readings])
        packed = array("d", numbers).tobytes()
        last = shape.last[0]
        base = self._size
        if last is None or keys != last.keys:
            lengths, cuts = self._lines(shape, keys, numbers, last)
        elif packed == last.values:
            # Nothing changed since the last render: its lines, as one slice.
            lengths, cuts = last.lengths, last.cuts
            self.raw(last.body[last.base : last.base + sum(lengths)])
        else:
            lengths, cuts = self._values(numbers, last), last.cuts
        self._made.append((shape, _Last(b"", base, keys, packed, lengths, cuts)))

    def _values(self, values: list[float], last: _Last) -> array[int]:
        """The same series as ``last``, in the same order, some values changed.

        What lies between two changed values (lines kept, and the label text of
        the next changed line) is copied as one slice. The new line lengths.
        """
        old, base, lengths, cuts = last.body, last.base, last.lengths, last.cuts
        before = memoryview(last.values).cast("d")
        copysign, append, number_of = math.copysign, self._parts.append, go_float
        out = array("I", lengths)
        # Offsets in ``old``: where line ``done`` starts, and the first byte not copied.
        pos = copied = base
        done = 0
        for i, (value, was) in enumerate(zip(values, before, strict=True)):
            # A NaN is written afresh, and minus zero is not zero (Go writes -0).
            if value == was and (value or copysign(1.0, value) == copysign(1.0, was)):
                continue
            if i != done:
                pos += sum(lengths[done:i])
            # What lies between the last value written and this one (the last one's
            # newline, the lines kept, this line's label text) is one slice.
            cut = cuts[i]
            append(old[copied : pos + cut])
            number = number_of(value).encode()
            append(number)
            out[i] = cut + len(number) + 1
            pos += lengths[i]
            copied, done = pos - 1, i + 1
        end = pos + sum(lengths[done:])
        if end > copied:
            append(old[copied:end])
        self._size += sum(out)
        return out

    def _lines(
        self,
        shape: _Shape,
        keys: list[tuple[str, ...]],
        values: list[float],
        last: _Last | None,
    ) -> tuple[array[int], array[int]]:
        """Series added, gone or moved since ``last``: each line on its own.

        A series ``last`` had keeps its label text, and its line when the value
        holds too. The new line lengths and value offsets.
        """
        sample = shape.sample
        if last is None:  # a family's first render: every line new, encoded at once
            prefixes = [f"{sample}{_labels(shape, labels)} " for labels in keys]
            lines = [f"{p}{go_float(v)}\n" for p, v in zip(prefixes, values, strict=True)]
            text = "".join(lines)
            data = text.encode()
            self.raw(data)
            if len(data) == len(text):  # ASCII: a character is a byte
                return array("I", map(len, lines)), array("I", map(len, prefixes))
            return (
                array("I", [len(line.encode()) for line in lines]),
                array("I", [len(p.encode()) for p in prefixes]),
            )
        lengths, cuts = array("I"), array("I")
        where = {k: n for n, k in enumerate(last.keys)}
        starts = list(accumulate(last.lengths, initial=last.base))
        before = memoryview(last.values).cast("d")
        parts, copysign = self._parts, math.copysign
        for labels, value in zip(keys, values, strict=True):
            j = where.get(labels, -1)
            if j >= 0:
                start, was, cut = starts[j], before[j], last.cuts[j]
                if value == was and (value or copysign(1.0, value) == copysign(1.0, was)):
                    line = last.body[start : start + last.lengths[j]]
                else:
                    line = last.body[start : start + cut] + go_float(value).encode() + b"\n"
            else:
                prefix = f"{sample}{_labels(shape, labels)} ".encode()
                cut = len(prefix)
                line = prefix + go_float(value).encode() + b"\n"
            parts.append(line)
            lengths.append(len(line))
            cuts.append(cut)
        self._size += sum(lengths)
        return lengths, cuts

    def finish(self, tail: bytes = b"") -> bytes:
        """The body; each family's lines recorded for the next render.

        A family this body does not carry forgets its lines: they would keep an
        older body alive (a device's family gone, a profile changed by SIGHUP).
        """
        self.raw(tail)
        body = b"".join(self._parts)
        holding = {id(shape): shape for shape, _ in self._made}
        for key, shape in _HOLDING.get(self.fmt, {}).items():
            if key not in holding:
                shape.last[0] = None
        for shape, made in self._made:
            made.body = body
            shape.last[0] = made
        _HOLDING[self.fmt] = holding
        self._parts, self._made = [], []
        return body


# The families of each format whose lines point into the last body written.
_HOLDING: dict[str, dict[int, _Shape]] = {}


def _histogram_lines(shape: _Shape, readings: Sequence[Reading], out: list[str]) -> None:
    sample = shape.sample
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
    body = Body(fmt)
    body.families(rows)
    return body.finish()


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
