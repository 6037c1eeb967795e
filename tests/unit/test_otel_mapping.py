"""The catalog's OpenTelemetry mapping: semantic conventions where they exist, accel.* elsewhere."""

from __future__ import annotations

import inspect
import re

import pytest
from opentelemetry.semconv._incubating.attributes import hw_attributes
from opentelemetry.semconv._incubating.metrics import hw_metrics

from exporter.catalog import CATALOG, Kind, MetricSpec
from exporter.catalog.otel import (
    COUNTS,
    INSTRUMENTS,
    METRICS,
    Instrument,
    Override,
    build,
    derive_name,
)


def semconv_metrics() -> dict[str, tuple[str, str]]:
    """name -> (instrument, unit) as the installed semantic-conventions package documents them."""
    source = inspect.getsource(hw_metrics)
    found = re.findall(
        r'^HW_\w+: Final = "([^"]+)"\n"""\n(?:.*\n)*?Instrument: (\w+)\nUnit: (\S+)', source, re.M
    )
    return {name: (instrument, unit) for name, instrument, unit in found}


def test_semantic_convention_names_match_the_published_conventions():
    published = semconv_metrics()
    assert "hw.gpu.utilization" in published  # the parse works
    used = [m for m in METRICS.values() if m.semconv]
    assert used
    for m in used:
        assert m.name in published, m.name
        instrument, unit = published[m.name]
        assert (m.instrument.value, m.unit) == (instrument, unit), m.row.name
    attribute_names = {v for k, v in vars(hw_attributes).items() if k.startswith("HW_")}
    for m in used:
        for key in (*m.keys, *(k for k, _ in m.constants)):
            assert not key.startswith("hw.") or key in attribute_names, key


@pytest.mark.parametrize(
    ("family", "name", "constants"),
    [
        ("accel_utilization_ratio", "hw.gpu.utilization", {"hw.gpu.task": "general"}),
        ("accel_encoder_utilization_ratio", "hw.gpu.utilization", {"hw.gpu.task": "encoder"}),
        ("accel_decoder_utilization_ratio", "hw.gpu.utilization", {"hw.gpu.task": "decoder"}),
        ("accel_memory_total_bytes", "hw.gpu.memory.limit", {}),
        ("accel_memory_used_bytes", "hw.gpu.memory.usage", {}),
        ("accel_power_watts", "hw.power", {"hw.type": "gpu"}),
        ("accel_energy_joules_total", "hw.energy", {"hw.type": "gpu"}),
    ],
)
def test_device_families_use_the_hardware_conventions(family, name, constants):
    m = METRICS[family]
    assert (m.name, dict(m.constants), m.semconv) == (name, constants, True)
    assert m.attributes(("0", "GPU-1")) == {"device": "0", "hw.id": "GPU-1", **constants}


def test_every_row_is_mapped_and_named_by_the_rules():
    assert set(METRICS) == set(CATALOG)
    for m in METRICS.values():
        assert m.semconv == m.name.startswith("hw."), m.name
        assert m.semconv or m.name.startswith("accel."), m.name
        assert "uuid" not in m.keys, m.row.name  # the device UUID is hw.id everywhere
        assert ("uuid" in m.row.labels) == ("hw.id" in m.keys), m.row.name
        assert m.unit == m.row.ucum_unit or m.unit.startswith("{"), m.row.name


def test_attributes_and_labels_round_trip():
    for m in METRICS.values():
        labels = tuple(f"v{i}" for i in range(len(m.row.labels)))
        attributes = m.attributes(labels)
        assert m.labels(attributes) == labels
        owners = [o for o in INSTRUMENTS[m.name] if o.labels(attributes) is not None]
        assert owners == [m], m.row.name  # a merged instrument's points have one owner each


def test_instrument_kinds_follow_the_catalog():
    for m in METRICS.values():
        if m.row.kind is Kind.COUNTER:
            assert m.instrument is Instrument.COUNTER
        elif m.row.kind is Kind.HISTOGRAM:
            assert m.instrument is Instrument.HISTOGRAM
        else:
            assert m.instrument in (Instrument.GAUGE, Instrument.UPDOWNCOUNTER)


@pytest.mark.parametrize(
    ("row", "name"),
    [
        (
            MetricSpec("accel_exporter_x_duration_seconds", Kind.GAUGE, "X.", unit="seconds"),
            "accel.exporter.x.duration",
        ),
        (MetricSpec("accel_ccl_bytes_total", Kind.COUNTER, "X.", unit="bytes"), "accel.ccl"),
        (MetricSpec("accel_ccl_ops_total", Kind.COUNTER, "X."), "accel.ccl.ops"),
        (MetricSpec("accel_job_info", Kind.INFO, "X."), "accel.job.info"),
    ],
)
def test_derived_names(row, name):
    assert derive_name(row) == name


def test_a_row_may_name_itself():
    row = MetricSpec("accel_new_thing", Kind.GAUGE, "X.", otel_name="accel.brand.new")
    assert build({row.name: row}, {})[row.name].name == "accel.brand.new"


def rows(*names: str, labels=("device", "uuid")) -> dict[str, MetricSpec]:
    return {n: MetricSpec(n, Kind.GAUGE, "X.", labels) for n in names}


@pytest.mark.parametrize(
    ("catalog", "overrides", "words"),
    [
        (rows("accel_a"), {"accel_gone": Override("accel.gone")}, "not in the catalog"),
        (rows("accel_a", "accel_b"), {"accel_a": Override("accel.b")}, "distinct constant"),
        (
            rows("accel_a", "accel_b"),
            {
                "accel_a": Override("accel.x", constants=(("k", "1"),)),
                "accel_b": Override("accel.x", constants=(("k", "1"),)),
            },
            "distinct constant",
        ),
        (
            rows("accel_a", "accel_b"),
            {
                "accel_a": Override("accel.x", unit="By", constants=(("k", "1"),)),
                "accel_b": Override("accel.x", constants=(("k", "2"),)),
            },
            "disagree",
        ),
        (
            {
                "accel_a": MetricSpec("accel_a", Kind.GAUGE, "A.", ("device", "uuid")),
                "accel_b": MetricSpec("accel_b", Kind.GAUGE, "B.", ("device", "uuid")),
            },
            {
                "accel_a": Override("accel.x", constants=(("k", "1"),)),
                "accel_b": Override("accel.x", constants=(("k", "2"),)),
            },
            "one shared description",
        ),
        (rows("accel_a"), {"accel_a": Override("9bad name")}, "not a valid"),
        (rows("accel_a"), {"accel_a": Override("accel.a", unit="b y")}, "UCUM"),
        (
            rows("accel_a"),
            {"accel_a": Override("accel.a", constants=(("device", "x"),))},
            "collide",
        ),
        (rows("accel_a", labels=("device",)), {"accel_a": Override("hw.thing")}, "hw.id"),
        (
            rows("accel_a"),
            {"accel_a": Override("accel.a", instrument=Instrument.HISTOGRAM)},
            "histogram",
        ),
    ],
)
def test_broken_mappings_are_refused(catalog, overrides, words):
    with pytest.raises(ValueError, match=words):
        build(catalog, overrides)


def test_count_families_carry_what_they_count_as_their_unit():
    for name, annotation in COUNTS.items():
        assert CATALOG[name].ucum_unit == "1", name  # only unit-less families are annotated
        assert re.fullmatch(r"\{[a-z_]+\}", annotation), annotation
        assert METRICS[name].unit == annotation
    # Every unit-less counter counts something: none is left as a bare "1".
    bare = [m.row.name for m in METRICS.values() if m.row.kind is Kind.COUNTER and m.unit == "1"]
    assert bare == []
    assert METRICS["accel_xid_errors_total"].unit == "{error}"
    assert METRICS["accel_ccl_ras_timeouts_total"].unit == "{timeout}"
    assert METRICS["accel_ccl_inspector_lines_total"].unit == "{line}"
    assert METRICS["accel_ccl_ras_events_total"].unit == "{event}"
    assert METRICS["accel_ccl_inspector_skipped_bytes_total"].unit == "By"
