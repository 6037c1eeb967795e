"""The demo backend's replies pass the daemon's own checks, and its values are plausible.

The daemon end to end is tests/e2e/test_demo.py; here the backend is driven in-process
(it loads no library) and its replies go through the wire parsers a DeviceSource uses.
"""

from __future__ import annotations

import json

import pytest

from exporter.backends import demo
from exporter.backends.base import BackendError
from exporter.sources.device import parse_inventory, parse_readings


def polled(backend: demo.DemoBackend, slow: bool = True, processes: bool = False):
    reply = backend.handle("poll", {"slow": slow, "processes": processes})
    json.dumps(reply)  # the worker frames it as JSON
    return reply


def by_name(readings) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in readings:
        out.setdefault(r.metric, []).append(r)
    return out


def test_the_inventory_and_replies_pass_the_daemons_checks():
    backend = demo.DemoBackend({"devices": 3})
    vendor, devices = parse_inventory(backend.bootstrap())
    assert vendor == "demo" and [d.uuid for d in devices] == [demo.uuid(i) for i in range(3)]
    assert all(dict(d.info)["model"] == demo.MODEL for d in devices)
    reply = polled(backend, processes=True)
    assert [s["up"] for s in reply["devices"]] == [True] * 3
    fast = by_name(parse_readings(reply["readings"], devices, "readings"))
    slow = by_name(parse_readings(reply["slow_readings"], devices, "slow_readings"))
    assert {"accel_power_watts", "accel_utilization_ratio", "accel_process_info"} <= set(fast)
    assert {"accel_ecc_errors_total", "accel_remapped_rows_pending"} <= set(slow)
    # Only the degraded GPU has a remapping pending; every ECC count is 0.
    pending = {r.labels[1]: r.value for r in slow["accel_remapped_rows_pending"]}
    assert pending == {u: float(u == demo.uuid(demo.DEGRADED)) for u in pending}
    assert {r.value for r in slow["accel_ecc_errors_total"]} == {0.0}
    # No slow fields on a fast poll, no process series unless asked.
    assert "slow_readings" not in polled(backend, slow=False)
    assert "accel_process_info" not in polled(backend, slow=False)["readings"]


def test_values_stay_in_range_and_energy_grows():
    backend = demo.DemoBackend({})
    backend.bootstrap()
    loads = [
        backend.load(position, backend.started + t)
        for position in range(demo.DEVICES)
        for t in range(0, int(demo.PERIOD), 7)
    ]
    assert 0 < min(loads) < 0.1 and 0.9 < max(loads) < 1  # a real swing, at the cap at times
    _, devices = parse_inventory({"vendor": "demo", "devices": backend.bootstrap()["devices"]})
    backend.last -= 10  # ten seconds since the previous poll
    first = by_name(parse_readings(polled(backend)["readings"], devices, "r"))
    backend.last -= 10
    second = by_name(parse_readings(polled(backend)["readings"], devices, "r"))
    for r in first["accel_memory_free_bytes"]:
        assert 0 < r.value < demo.MEMORY
    for r in first["accel_power_watts"]:
        assert demo.IDLE_POWER <= r.value <= demo.POWER_LIMIT
    energy = [
        (a.value, b.value)
        for a, b in zip(
            first["accel_energy_joules_total"], second["accel_energy_joules_total"], strict=True
        )
    ]
    # About ten seconds of 90-700 W each time.
    assert all(b - a >= 10 * demo.IDLE_POWER * 0.9 for a, b in energy), energy


def test_no_gpu_or_another_operation_is_an_error():
    with pytest.raises(BackendError, match="no_devices"):
        demo.DemoBackend({"devices": 0}).bootstrap()
    backend = demo.DemoBackend({})
    backend.bootstrap()
    with pytest.raises(BackendError, match="unknown_op"):
        backend.handle("reset", {})
