"""The catalog's OpenTelemetry mapping: semantic conventions where they exist, accel.* elsewhere."""

from __future__ import annotations

import inspect
import re

import pytest
from opentelemetry.semconv._incubating.attributes import hw_attributes
from opentelemetry.semconv._incubating.metrics import hw_metrics

from exporter.catalog import CATALOG, Kind, MetricSpec
from exporter.catalog.otel import INSTRUMENTS, METRICS, Instrument, build, derive_name


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
    assert build({row.name: row})[row.name].name == "accel.brand.new"


def test_a_row_carries_its_whole_mapping():
    row = MetricSpec(
        "accel_thing_widgets",
        Kind.GAUGE,
        "X.",
        ("device", "uuid", "colour"),
        otel_name="accel.thing.widgets",
        otel_instrument=Instrument.UPDOWNCOUNTER,
        otel_unit="{widget}",
        otel_constants=(("shape", "round"),),
        otel_attributes=(("colour", "accel.colour"),),
        otel_description="Widgets.",
    )
    m = build({row.name: row})[row.name]
    assert (m.name, m.instrument, m.unit, m.keys, m.constants, m.description, m.semconv) == (
        "accel.thing.widgets",
        Instrument.UPDOWNCOUNTER,
        "{widget}",
        ("device", "hw.id", "accel.colour"),
        (("shape", "round"),),
        "Widgets.",
        False,
    )


def test_the_positional_signature_still_builds_rows():
    # Rows written before the OTel fields existed keep working, with the derived mapping.
    row = MetricSpec("accel_x_seconds", Kind.GAUGE, "X.", ("device",), "seconds", "", ())
    m = build({row.name: row})[row.name]
    assert (m.name, m.unit, m.keys, m.constants) == ("accel.x", "s", ("device",), ())


def row(name: str, help: str = "X.", labels=("device", "uuid"), **otel) -> MetricSpec:
    return MetricSpec(name, Kind.GAUGE, help, labels, **otel)


def rows(*specs: MetricSpec) -> dict[str, MetricSpec]:
    return {r.name: r for r in specs}


@pytest.mark.parametrize(
    ("catalog", "words"),
    [
        (
            rows(row("accel_a"), row("accel_b", otel_name="accel.a")),
            "distinct constant",
        ),
        (
            rows(
                row("accel_a", otel_name="accel.x", otel_constants=(("k", "1"),)),
                row("accel_b", otel_name="accel.x", otel_constants=(("k", "1"),)),
            ),
            "distinct constant",
        ),
        (
            rows(
                row("accel_a", otel_name="accel.x", otel_unit="{b}", otel_constants=(("k", "1"),)),
                row("accel_b", otel_name="accel.x", otel_constants=(("k", "2"),)),
            ),
            "disagree",
        ),
        (
            rows(
                row("accel_a", "A.", otel_name="accel.x", otel_constants=(("k", "1"),)),
                row("accel_b", "B.", otel_name="accel.x", otel_constants=(("k", "2"),)),
            ),
            "one shared description",
        ),
        (rows(row("accel_a", otel_name="9bad name")), "not a valid"),
        (rows(row("accel_a", otel_constants=(("device", "x"),))), "collide"),
        (rows(row("accel_a", labels=("device",), otel_name="hw.thing", semconv=True)), "hw.id"),
        (rows(row("accel_a", otel_name="hw.thing")), "semantic conventions"),
        (rows(row("accel_a", semconv=True)), "semantic conventions"),
        (rows(row("accel_a", otel_attributes=(("nope", "x"),))), "does not have"),
        (rows(row("accel_a", otel_instrument=Instrument.HISTOGRAM)), "histogram"),
    ],
)
def test_broken_mappings_are_refused(catalog, words):
    with pytest.raises(ValueError, match=words):
        build(catalog)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"otel_unit": "b y"}, "UCUM annotation"),
        ({"otel_unit": "{byte}", "unit": "bytes"}, "unit-less"),
    ],
)
def test_broken_otel_fields_are_refused_by_the_row(kwargs, words):
    with pytest.raises(ValueError, match=words):
        MetricSpec("accel_a_bytes", Kind.GAUGE, "X.", **kwargs)


def test_count_families_carry_what_they_count_as_their_unit():
    annotated = [row for row in CATALOG.values() if row.otel_unit]
    assert len(annotated) > 40
    for row in annotated:
        assert row.ucum_unit == "1", row.name  # only unit-less families are annotated
        assert re.fullmatch(r"\{[a-z_]+\}", row.otel_unit), row.otel_unit
        assert METRICS[row.name].unit == row.otel_unit
    # Every unit-less counter counts something: none is left as a bare "1".
    bare = [m.row.name for m in METRICS.values() if m.row.kind is Kind.COUNTER and m.unit == "1"]
    assert bare == []
    assert METRICS["accel_xid_errors_total"].unit == "{error}"
    assert METRICS["accel_ccl_ras_timeouts_total"].unit == "{timeout}"
    assert METRICS["accel_ccl_inspector_lines_total"].unit == "{line}"
    assert METRICS["accel_ccl_ras_events_total"].unit == "{event}"
    assert METRICS["accel_ccl_inspector_skipped_bytes_total"].unit == "By"
