"""The daemon's parsing of a device worker's readings (wire shapes: exporter.sources.device)."""

from __future__ import annotations

import json

import pytest

from exporter.model import Reading
from exporter.sources.device import DeviceId, ShapeError, parse_readings

DEVICES = [DeviceId("0", "GPU-a", ()), DeviceId("1", "GPU-b", ())]


def parse(raw: object) -> list[Reading]:
    return parse_readings(raw, DEVICES, "readings")


def test_rows_become_readings_with_the_identity_of_their_position():
    got = parse(
        {
            "accel_power_watts": [0, 312.5, 1, 298],
            "accel_clock_hertz": [1, "graphics", 1.98e9, 0, "sm", 1.755e9],
            "accel_ecc_errors_total": [0, "corrected", "volatile", 3],
            "accel_temperature_celsius": [],
        }
    )
    assert got == [
        Reading("accel_power_watts", ("0", "GPU-a"), 312.5),
        Reading("accel_power_watts", ("1", "GPU-b"), 298.0),
        Reading("accel_clock_hertz", ("1", "GPU-b", "graphics"), 1.98e9),
        Reading("accel_clock_hertz", ("0", "GPU-a", "sm"), 1.755e9),
        Reading("accel_ecc_errors_total", ("0", "GPU-a", "corrected", "volatile"), 3.0),
    ]
    assert all(type(r.value) is float and type(r.labels) is tuple for r in got)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ([["accel_power_watts", ["0", "GPU-a"], 1.0]], "is not an object"),  # the old list form
        ({"accel_no_such_family": [0, 1.0]}, "not a device family"),
        ({"accel_exporter_source_up": [0, 1.0]}, "not a device family"),  # no device label
        ({"accel_power_watts": [0, 1.0, 1]}, "rows of 2"),  # ragged: never truncated
        ({"accel_power_watts": {"0": 1.0}}, "rows of 2"),
        ({"accel_clock_hertz": [0, 1.98e9]}, "rows of 3"),  # a label missing
        ({"accel_power_watts": [2, 1.0]}, "outside the inventory"),
        ({"accel_power_watts": [-1, 1.0]}, "outside the inventory"),
        ({"accel_power_watts": [True, 1.0]}, "outside the inventory"),
        ({"accel_power_watts": [0.0, 1.0]}, "outside the inventory"),
        ({"accel_power_watts": ["0", 1.0]}, "outside the inventory"),
        ({"accel_power_watts": [[0], 1.0]}, "outside the inventory"),  # unhashable
        ({"accel_power_watts": [{}, 1.0]}, "outside the inventory"),
        # Families the daemon derives itself: a worker cannot overrule its verdict.
        ({"accel_device_up": [0, 1.0]}, "not a device family"),
        ({"accel_device_down_reason_info": [0, "ok", 1.0]}, "not a device family"),
        # Another source's family, though it has device labels.
        ({"accel_device_workload_info": [0, "ns", "pod", "c", 1.0]}, "not a device family"),
        ({"accel_clock_hertz": [0, 7, 1.0]}, "not a string"),
        ({"accel_clock_hertz": [0, None, 1.0]}, "not a string"),
        ({"accel_power_watts": [0, "1.0"]}, "not a number"),
        ({"accel_power_watts": [0, None]}, "not a number"),
        ({"accel_power_watts": [0, False]}, "not a number"),
        ({"accel_power_watts": [0, float("nan")]}, "not finite"),
        ({"accel_power_watts": [0, float("inf")]}, "not finite"),
        ({"accel_power_watts": [0, 10**400]}, "not finite"),
    ],
)
def test_anything_malformed_is_a_shape_error(raw, why):
    with pytest.raises(ShapeError, match=why):
        parse(raw)


def test_numbers_json_turns_into_infinity_are_refused():
    raw = json.loads('{"accel_power_watts": [0, 1e999]}')  # overflows to inf when decoded
    with pytest.raises(ShapeError, match="not finite"):
        parse(raw)
