"""model.readings_of: the bulk constructor gives ordinary, frozen Readings."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.model import Reading, readings_of


def test_bulk_readings_are_ordinary_frozen_readings():
    fast, other = readings_of("accel_power_watts", [("0", "GPU-1"), ("1", "GPU-2")], [312.5, 7.0])
    assert other == Reading("accel_power_watts", ("1", "GPU-2"), 7.0)
    slow = Reading("accel_power_watts", ("0", "GPU-1"), 312.5)
    assert type(fast) is Reading
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert dataclasses.astuple(fast) == ("accel_power_watts", ("0", "GPU-1"), 312.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.value = 1.0  # type: ignore[misc]


def test_bulk_readings_of_nothing():
    assert readings_of("accel_power_watts", [], []) == []
