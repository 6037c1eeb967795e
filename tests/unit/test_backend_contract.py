"""The backend contract: status-code tables, the one add path, the one device loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from exporter.backend_api.wire import Rows, new_rows
from exporter.backends import amdsmi_fields, hlml, levelzero
from exporter.backends import nvml_support as nv
from exporter.backends.contract import (
    FIELD_ERRORS,
    Codes,
    DeviceGone,
    Emitter,
    Failing,
    count,
    poll_devices,
)
from exporter.catalog.device import ROWS
from exporter.catalog.vocabulary import DEVICE_BACKENDS

TABLES: dict[str, Codes[Any]] = {
    "nvml": nv.CODES,
    "amdsmi": amdsmi_fields.CODES,
    "levelzero": levelzero.CODES,
    "hlml": hlml.CODES,
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_is_consistent(name):
    codes = TABLES[name]
    assert codes.absent, "a backend without absent codes would count every missing field"
    assert codes.gone, "a backend must say which codes take a device down"
    assert not codes.absent & set(codes.gone), "a code is either absent or gone, not both"
    for code, reason in codes.gone.items():
        assert reason and reason == reason.lower() and " " not in reason, (code, reason)


def test_a_table_classifies_absent_failed_and_gone():
    codes: Codes[int] = Codes(
        names={1: "busy", 2: "lost"}, absent=frozenset({3}), gone={2: "gpu_lost"}, unknown="e_{}"
    )
    assert codes.failed(3, "call") == ""
    assert codes.failed(1, "call") == "busy"
    assert codes.failed(9, "call") == "e_9"
    with pytest.raises(DeviceGone) as gone:
        codes.failed(2, "getPower", "detail")
    assert (gone.value.reason, gone.value.detail) == ("gpu_lost", "getPower: detail")
    assert codes.down(2) == "gpu_lost"
    assert codes.down(1) == "busy"


def test_vendor_tables_keep_their_reasons():
    assert nv.reason_of(15) == "gpu_lost"
    assert nv.reason_of(12345) == "nvml_error_12345"
    with pytest.raises(DeviceGone, match="gpu_lost"):
        nv.CODES.failed(nv.GPU_IS_LOST, "nvmlDeviceGetPowerUsage")
    assert nv.CODES.failed(nv.NOT_SUPPORTED, "nvmlDeviceGetNumFans") == ""
    assert hlml.return_name(77) == "hlml_return_77"
    assert hlml.CODES.gone == {hlml.AIP_IS_LOST: "gpu_lost"}
    assert levelzero.CODES.reason(0x12) == "ze_result_0x12"
    assert levelzero.CODES.down(levelzero.zb.DEVICE_REQUIRES_RESET) == "reset_required"
    assert amdsmi_fields.CODES.failed("no_perm", "power") == "no_perm"
    assert amdsmi_fields.CODES.failed("not_supported", "power") == ""
    with pytest.raises(DeviceGone, match="gpu_lost"):
        amdsmi_fields.CODES.failed("io", "power")


@pytest.mark.parametrize("value", [nv.U32_MAX, nv.U64_MAX, -1, math.inf, math.nan, None])
def test_sentinels_and_non_finite_values_are_never_emitted(value):
    out = Emitter(0, new_rows(), nv.SENTINELS)
    out.add("accel_power_watts", value)
    assert out.rows == {}


def test_a_backend_without_sentinels_keeps_all_ones_but_not_nan():
    out = Emitter(1, new_rows())
    out.add("accel_power_watts", nv.U32_MAX)
    out.add("accel_power_watts", math.nan)
    assert out.rows == {"accel_power_watts": [1, nv.U32_MAX]}


def test_ratio_rejects_out_of_range_percentages_and_rows_are_in_wire_form():
    out = Emitter(3, new_rows(), nv.SENTINELS)
    out.ratio("accel_utilization_ratio", 101)
    out.ratio("accel_utilization_ratio", nv.U32_MAX)
    out.ratio("accel_utilization_ratio", math.nan)
    out.ratio("accel_utilization_ratio", 0)
    out.ratio("accel_fan_speed_ratio", 55, "1")
    out.ratio("accel_fan_speed_ratio", 60, "2")
    assert out.rows == {
        "accel_utilization_ratio": [3, 0.0],
        "accel_fan_speed_ratio": [3, "1", 0.55, 3, "2", 0.6],
    }


def test_row_prefixes_are_shared_per_dimension_value():
    cache: dict = {}
    a, b = Emitter(0, new_rows(), cache=cache), Emitter(0, new_rows(), cache=cache)
    assert a.prefix("gpu") is b.prefix("gpu")
    assert a.prefix("1", "0") == (0, "1", "0")


@dataclass
class Dev:
    index: int
    device: str
    uuid: str
    down: str = ""
    errors: dict[str, int] = field(default_factory=dict)
    gone: str = ""


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.lines.append(("warning", event, kw))

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append(("info", event, kw))


def read(dev: Dev, position: int, rows: Rows, slow: Rows | None) -> None:
    rows["accel_power_watts"] += (position, 100.0 + position)
    if slow is not None:
        slow["accel_clock_max_hertz"] += (position, "graphics", 1e9)
    if dev.gone:
        raise DeviceGone(dev.gone, "half read")


def test_the_loop_isolates_a_gone_device_counts_errors_and_logs_changes_once():
    devs = [Dev(4, "4", "u4"), Dev(7, "7", "u7", gone="gpu_lost"), Dev(9, "9", "u9")]
    count(devs[0].errors, "unknown")
    count(devs[0].errors, "timeout", 2)
    count(devs[1].errors, "unknown")  # a device that is down shows no counts either
    log = Log()
    reply = poll_devices(devs, True, read, log, "nvml")
    assert reply["devices"] == [
        {"uuid": "u4", "up": True, "reason": ""},
        {"uuid": "u7", "up": False, "reason": "gpu_lost"},
        {"uuid": "u9", "up": True, "reason": ""},
    ]
    assert reply["readings"] == {
        "accel_power_watts": [0, 100.0, 2, 102.0],
        FIELD_ERRORS: [0, "nvml", "timeout", 2, 0, "nvml", "unknown", 1],
    }
    assert reply["slow_readings"] == {
        "accel_clock_max_hertz": [0, "graphics", 1e9, 2, "graphics", 1e9]
    }
    assert log.lines == [
        ("warning", "device down", {"device": "7", "reason": "gpu_lost", "detail": "half read"})
    ]
    devs[1].gone = ""
    again = poll_devices(devs, False, read, log, "nvml")
    assert "slow_readings" not in again
    assert [d["up"] for d in again["devices"]] == [True, True, True]
    assert log.lines[1:] == [("info", "device up", {"device": "7"})]
    poll_devices(devs, False, read, log, "nvml")
    assert len(log.lines) == 2  # no change, no line


def test_one_field_errors_family_for_every_backend():
    rows = [spec for spec in ROWS if spec.name == FIELD_ERRORS]
    assert len(rows) == 1
    assert rows[0].labels == ("device", "uuid", "source", "reason")
    assert tuple(rows[0].values["source"]) == DEVICE_BACKENDS
    # TPU faults are per runtime address, told apart by gRPC status (backends/tpu.py's
    # IDLE_CODES, ABSENT_CODES): no status takes a chip down, so it has no Codes table.
    assert set(TABLES) == set(DEVICE_BACKENDS) - {"tpu"}


def test_a_failing_field_is_logged_when_it_starts_changes_and_recovers_not_every_poll():
    log = Log()
    failing = Failing(log)
    dev = Dev(0, "0", "u0")
    for _ in range(3):
        failing.note(dev, "power", "timeout")
        failing.recovered(dev, {"power"})
    failing.note(dev, "power", "unknown")
    failing.recovered(dev, set())
    failing.recovered(dev, set())
    assert log.lines == [
        ("warning", "field read failed", {"device": "0", "field": "power", "reason": "timeout"}),
        ("warning", "field read failed", {"device": "0", "field": "power", "reason": "unknown"}),
        ("info", "field read recovered", {"device": "0", "field": "power"}),
    ]
