"""Enumerated label values: declared on the row, one vocabulary across vendors, enforced."""

from __future__ import annotations

import pytest

from exporter.backends import (
    amdsmi_events,
    amdsmi_fields,
    amdsmi_ras,
    hlml,
    levelzero,
    nvml_reliability,
    nvml_support,
)
from exporter.catalog import CATALOG, Kind, MetricSpec, vocabulary
from exporter.ccl import ras_state
from exporter.health import STATES
from exporter.host import host_proc as host
from exporter.host import neuron_report
from exporter.model import Reading
from exporter.outputs import otlp_account
from exporter.store import LabelValueError, validate


def ecc(kind: str, counter: str = "") -> Reading:
    return Reading("accel_ecc_errors_total", ("0", "GPU-0", kind, counter), 1.0)


def test_a_value_outside_the_enumeration_raises_in_strict_mode():
    with pytest.raises(LabelValueError, match="type='correctable' is not one of"):
        validate([ecc("uncorrected"), ecc("correctable")], strict=True)


def test_the_suite_runs_strict():
    # tests/conftest.py turns strict mode on; validate's default follows it.
    with pytest.raises(LabelValueError):
        validate([ecc("uncorrectable")])


def test_in_production_the_reading_is_dropped_and_reported_once():
    first, bad = validate([ecc("corrected"), ecc("bogus_once", "volatile")], strict=False)
    assert first == [ecc("corrected")]
    assert len(bad) == 1 and "type='bogus_once'" in bad[0] and "dropped" in bad[0]
    again, bad = validate([ecc("bogus_once", "volatile")], strict=False)
    assert (again, bad) == ([], [])  # dropped, not reported again


def test_every_enumerated_label_is_checked():
    with pytest.raises(LabelValueError, match="counter='lifetime'"):
        validate([ecc("corrected", "lifetime")], strict=True)
    ok, bad = validate([ecc("deferred", ""), ecc("uncorrected", "aggregate")], strict=True)
    assert len(ok) == 2 and bad == []


def test_a_row_refuses_values_for_a_label_it_lacks_or_an_empty_list():
    with pytest.raises(ValueError, match="not a label"):
        MetricSpec("accel_x", Kind.GAUGE, "X.", ("a",), values={"b": ("1",)})
    with pytest.raises(ValueError, match="non-empty"):
        MetricSpec("accel_x", Kind.GAUGE, "X.", ("a",), values={"a": ()})
    with pytest.raises(ValueError, match="non-empty"):
        MetricSpec("accel_x", Kind.GAUGE, "X.", ("a",), values={"a": ("1", "1")})


def test_one_ecc_vocabulary_for_every_vendor():
    # The words each backend writes into accel_ecc_errors_total{type}: the same on every vendor.
    written = {
        "nvml": {name for _, name in nvml_support.ECC_TYPES},
        "hlml": {name for _, name in hlml.ECC_TYPES},
        "amdsmi": {name for _, name in amdsmi_fields.ECC_TOTALS} - {"deferred"},
        "levelzero": set(levelzero.ECC_TYPES),
        "neuron": set(neuron_report.ECC_FIELDS.values()),
    }
    assert all(words == set(vocabulary.ECC_CORRECTION) for words in written.values()), written


@pytest.mark.parametrize(
    ("family", "label", "table"),
    [
        ("accel_device_health", "state", STATES),
        ("accel_host_cpu_seconds_total", "mode", host.CPU_MODES),
        ("accel_clock_hertz", "clock", [n for _, n in nvml_support.CLOCKS]),
        ("accel_clock_hertz", "clock", [n for _, n in amdsmi_fields.CLOCKS]),
        ("accel_clock_hertz", "clock", levelzero.CLOCKS.values()),
        ("accel_temperature_celsius", "sensor", [n for _, n in amdsmi_fields.TEMPERATURES]),
        ("accel_temperature_celsius", "sensor", levelzero.SENSORS.values()),
        ("accel_temperature_celsius", "sensor", [n for _, n in hlml.SENSORS]),
        ("accel_clock_throttle_active", "reason", [n for _, n in nvml_support.THROTTLE_REASONS]),
        ("accel_clock_throttle_active", "reason", [n for _, n in amdsmi_fields.THROTTLES]),
        ("accel_clock_throttle_active", "reason", [n for _, n in levelzero.THROTTLE_REASONS]),
        ("accel_clock_throttle_active", "reason", [n for _, n in hlml.THROTTLE_REASONS]),
        (
            "accel_clock_violation_seconds_total",
            "reason",
            [n for _, n in nvml_support.VIOLATION_FIELDS],
        ),
        ("accel_clock_violation_seconds_total", "reason", [n for _, n in hlml.VIOLATIONS]),
        ("accel_retired_pages", "cause", [n for _, n in nvml_support.RETIREMENT_CAUSES]),
        ("accel_gaudi_replaced_rows", "cause", [n for _, n in hlml.ROW_CAUSES]),
        ("accel_ecc_errors_total", "counter", [n for _, n in nvml_support.ECC_COUNTERS]),
        ("accel_ecc_errors_total", "counter", [n for _, n in hlml.ECC_COUNTERS]),
        ("accel_ecc_errors_total", "type", [n for _, n in amdsmi_fields.ECC_TOTALS]),
        ("accel_device_events_total", "event", [n for _, n in nvml_support.EVENTS]),
        ("accel_device_events_total", "event", amdsmi_events.EVENT_LABELS.values()),
        ("accel_nvlink_errors_total", "type", [n for _, n in nvml_reliability.NVLINK_ERRORS]),
        ("accel_amd_bad_pages", "status", amdsmi_ras.PAGE_STATUSES.values()),
        ("accel_amd_afid_errors_total", "severity", amdsmi_ras.SEVERITIES.values()),
        (
            "accel_amd_violation_residency_total",
            "reason",
            [n for _, n in (*amdsmi_fields.RESIDENCIES, *amdsmi_fields.XCP_RESIDENCIES)],
        ),
        (
            "accel_amd_temperature_limit_celsius",
            "limit",
            [n for _, n in amdsmi_fields.TEMPERATURE_LIMITS],
        ),
        ("accel_nvidia_fabric_state", "state", [n for _, n in nvml_reliability.FABRIC_STATES]),
        ("accel_ccl_job_state", "state", ras_state.STATES),
        ("accel_neuron_execution_status_total", "status", neuron_report.EXEC_STATUS),
        ("accel_neuron_execution_errors_total", "error", neuron_report.EXEC_ERRORS),
        ("accel_exporter_otlp_exports_total", "result", otlp_account.RESULTS),
    ],
)
def test_backend_tables_speak_the_catalog_vocabulary(family, label, table):
    # Where a backend maps vendor codes to label values through a table, every value it
    # can write is in the row's enumeration (the fakes cover what they exercise; this, all).
    assert set(table) <= set(CATALOG[family].values[label]), set(table) - set(
        CATALOG[family].values[label]
    )


def test_one_clock_vocabulary_for_every_vendor():
    # The GPU core clock is "graphics" and the media clock "video" wherever a vendor has them
    # (Level Zero's domains were "gpu" and "media").
    written = {
        "nvml": {name for _, name in nvml_support.CLOCKS},
        "amdsmi": {name for _, name in amdsmi_fields.CLOCKS},
        "levelzero": set(levelzero.CLOCKS.values()),
    }
    for words in written.values():
        assert {"graphics", "memory", "video"} <= words, written


def test_one_board_sensor_name():
    # The board's temperature is "board" on Gaudi and Intel (Level Zero's was "gpu_board").
    assert "board" in {name for _, name in hlml.SENSORS}
    assert "board" in set(levelzero.SENSORS.values())
