"""The hot path's tuned helpers against plain reference implementations (issue 23).

``model.readings_of`` (the bulk Reading constructor) and
``sources.device.parse_readings`` (the check of a worker's reply, column by
column in C) are the two places tuned for speed on the way in;
``outputs.text_format.Body`` (lines copied from the last body while labels and
value hold) on the way out; ``wire.drop`` removes a device's rows again. Each is compared here, on inputs Hypothesis draws, with the obvious
Python loop its docstring describes: same readings, or the same ShapeError
message, for every input. A change that makes a helper faster and different
fails here, whatever the example tests cover.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.backend_api.wire import ROW_WIDTH, drop
from exporter.catalog import CATALOG, Kind
from exporter.model import Reading, readings_of
from exporter.outputs import text_format
from exporter.sources.device import DeviceId, ShapeError, parse_readings

DEVICES = [DeviceId(str(i), f"GPU-{i}", ()) for i in range(3)]

# Families of each row width the wire knows, a few of each: the reference reads the
# width from ROW_WIDTH as the fast path does, so any family would do.
FAMILIES = sorted(ROW_WIDTH, key=lambda m: (ROW_WIDTH[m], m))
BY_WIDTH: dict[int, list[str]] = {}
for _metric in FAMILIES:
    BY_WIDTH.setdefault(ROW_WIDTH[_metric], [])
    if len(BY_WIDTH[ROW_WIDTH[_metric]]) < 3:
        BY_WIDTH[ROW_WIDTH[_metric]].append(_metric)
SOME_FAMILIES = [m for group in BY_WIDTH.values() for m in group]

LABEL_TEXT = st.text(alphabet="abcxyz_0", max_size=4)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_parse(raw: Any, devices: list[DeviceId], where: str) -> list[Reading]:
    """parse_readings as a plain loop over rows, item by item (the module docstring's rules)."""
    if not isinstance(raw, dict):
        raise ShapeError(f"{where} is not an object")
    out: list[Reading] = []
    for metric, rows in raw.items():
        width = ROW_WIDTH.get(metric)
        if width is None:
            raise ShapeError(f"{where}: {metric!r} is not a device family")
        if type(rows) is not list or len(rows) % width:
            raise ShapeError(f"{where}.{metric} is not a list of rows of {width}")
        table = [rows[i : i + width] for i in range(0, len(rows), width)]
        # The checks run family-wide in this order: positions, labels, values.
        for row in table:
            if type(row[0]) is not int or not 0 <= row[0] < len(devices):
                raise ShapeError(f"{where}.{metric} names a device outside the inventory")
        for row in table:
            if any(type(label) is not str for label in row[1:-1]):
                raise ShapeError(f"{where}.{metric} has a label that is not a string")
        numbers = []
        for row in table:
            value = row[-1]
            if type(value) not in (int, float):
                raise ShapeError(f"{where}.{metric} has a value that is not a number")
        for row in table:
            try:
                number = float(row[-1])
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise ShapeError(f"{where}.{metric} has a value that is not finite")
            numbers.append(number)
        for row, number in zip(table, numbers, strict=True):
            device = devices[row[0]]
            labels = (device.device, device.uuid, *row[1:-1])
            out.append(Reading(metric, labels, number))
    return out


def outcome(parse: Any, raw: Any) -> tuple[str, Any]:
    try:
        return "ok", parse(raw, DEVICES, "readings")
    except ShapeError as exc:
        return "error", str(exc)


# One row of a family: mostly valid, now and then one cell of the wrong kind.
POSITION = st.one_of(
    st.integers(0, len(DEVICES) - 1),
    st.sampled_from([-1, len(DEVICES), True, 0.0, "0", None]),
)
VALUE = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(-(2**63), 2**64),
    st.sampled_from([math.nan, math.inf, -math.inf, 10**400, "1.0", None, False, True]),
)
LABEL = st.one_of(LABEL_TEXT, LABEL_TEXT, LABEL_TEXT, st.sampled_from([7, None, 1.5]))


@st.composite
def family_rows(draw: st.DrawFn, metric: str, clean: bool) -> list[Any]:
    width = ROW_WIDTH[metric]
    rows: list[Any] = []
    for _ in range(draw(st.integers(0, 4))):
        if clean:
            rows.append(draw(st.integers(0, len(DEVICES) - 1)))
            rows += [draw(LABEL_TEXT) for _ in range(width - 2)]
            rows.append(draw(st.floats(allow_nan=False, allow_infinity=False)))
        else:
            rows.append(draw(POSITION))
            rows += [draw(LABEL) for _ in range(width - 2)]
            rows.append(draw(VALUE))
    if not clean and draw(st.integers(0, 9)) == 0:
        rows.append(0)  # ragged
    return rows


@st.composite
def replies(draw: st.DrawFn, clean: bool) -> Any:
    metrics = draw(st.lists(st.sampled_from(SOME_FAMILIES), max_size=4, unique=True))
    reply: dict[str, Any] = {m: draw(family_rows(m, clean)) for m in metrics}
    if not clean and draw(st.integers(0, 19)) == 0:
        reply["accel_no_such_family"] = [0, 1.0]
    return reply


@SETTINGS
@given(replies(clean=True))
def test_parse_readings_equals_the_plain_loop_on_valid_replies(raw):
    fast, slow = outcome(parse_readings, raw), outcome(reference_parse, raw)
    assert fast == slow and fast[0] == "ok"
    assert all(type(r.value) is float and type(r.labels) is tuple for r in fast[1])


@SETTINGS
@given(replies(clean=False))
def test_parse_readings_equals_the_plain_loop_on_any_reply(raw):
    assert outcome(parse_readings, raw) == outcome(reference_parse, raw)


LABELS = st.tuples(LABEL_TEXT, LABEL_TEXT) | st.tuples(LABEL_TEXT, LABEL_TEXT, LABEL_TEXT)


@SETTINGS
@given(st.lists(st.tuples(LABELS, st.floats(allow_nan=False)), max_size=20), LABEL_TEXT)
def test_readings_of_equals_the_constructor(pairs, metric):
    labels = [p[0] for p in pairs]
    values = [p[1] for p in pairs]
    fast = readings_of(metric, iter(labels), iter(values))
    slow = [Reading(metric, lab, v) for lab, v in zip(labels, values, strict=True)]
    assert fast == slow
    assert [hash(r) for r in fast] == [hash(r) for r in slow]
    assert all(type(r) is Reading for r in fast)


@SETTINGS
@given(
    st.lists(st.sampled_from(SOME_FAMILIES), max_size=4, unique=True),
    st.integers(0, len(DEVICES) - 1),
    st.data(),
)
def test_drop_equals_filtering_row_by_row(families, position, data):
    rows = {metric: data.draw(family_rows(metric, clean=True)) for metric in families}
    expected = {}
    for metric, items in rows.items():
        width = ROW_WIDTH[metric]
        table = [items[i : i + width] for i in range(0, len(items), width)]
        expected[metric] = [item for row in table if row[0] != position for item in row]
    drop(rows, position)
    assert rows == expected


# Families of each kind a line cache serves (histograms are written afresh every time).
CACHED_ROWS = [
    next(r for r in CATALOG.values() if r.kind is kind and len(r.labels) == width)
    for kind in (Kind.GAUGE, Kind.COUNTER)
    for width in (0, 2, 3)
]
VALUES = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 7.5, float("nan"), math.inf, -math.inf, 1e22, 123456789.0]),
    st.floats(),
    st.integers(min_value=-(2**60), max_value=2**60),
)
# Label values with the characters the formats escape.
ESCAPED_TEXT = st.text(alphabet='ab"\\\n\u00e9', max_size=3)


def reference_encode(rows: list[tuple[Any, list[Reading]]], fmt: str) -> bytes:
    """Every line written afresh: header, then ``sample{labels} value`` per reading."""
    out = []
    for spec, readings in rows:
        shape = text_format._shape(spec, fmt)
        out.append(shape.header.decode())
        for r in readings:
            labels = text_format._labels(shape, r.labels)
            out.append(f"{shape.sample}{labels} {text_format.go_float(r.value)}\n")
    return "".join(out).encode()


@st.composite
def renders(draw: st.DrawFn) -> list[list[tuple[Any, list[Reading]]]]:
    """Up to 6 renders of the same families, series kept, changed, added, dropped, moved."""
    out = []
    series: dict[Any, list[tuple[tuple[str, ...], float]]] = {}
    for _ in range(draw(st.integers(1, 6))):
        rows = []
        for spec in CACHED_ROWS:
            width = len(spec.labels)
            now = []
            for labels, value in series.get(spec, []):
                step = draw(st.sampled_from(["keep", "keep", "change", "drop"]))
                if step == "keep":
                    now.append((labels, value))
                elif step == "change":
                    now.append((labels, draw(VALUES)))
            for _ in range(draw(st.integers(0, 3))):
                labels = tuple(draw(ESCAPED_TEXT) for _ in range(width))
                if all(labels != known for known, _ in now):
                    now.insert(draw(st.integers(0, len(now))), (labels, draw(VALUES)))
            if draw(st.booleans()):
                now = draw(st.permutations(now))
            series[spec] = now
            rows.append((spec, [Reading(spec.name, labels, value) for labels, value in now]))
        out.append(rows)
    return out


@SETTINGS
@given(renders(), st.sampled_from([text_format.TEXT, text_format.OPENMETRICS]))
def test_cached_lines_equal_lines_written_afresh(sequence, fmt):
    text_format._shape.cache_clear()  # no lines left from another example
    for rows in sequence:
        body = text_format.Body(fmt)
        body.families(rows)
        assert body.finish() == reference_encode(rows, fmt)
