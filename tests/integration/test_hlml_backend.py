"""The hlml backend in this process, driving the real habana-pyhlml against the fake libhlml.

pyhlml opens its library afresh at every hlmlInit and the fake reads its state
file there, so each test has its own devices.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from exporter.backends.base import InventoryChanged
from exporter.backends.hlml import HlmlBackend
from tests.fakes.hlml import control, expected
from tests.fakes.hlml.control import FakeHlml
from tests.helpers.backend_harness import Backends, key, poll, series, started, unavailable

Make = Backends[HlmlBackend]


def me(i: int) -> dict[str, str]:
    return {"device": str(i), "uuid": control.uuid(i)}


def test_layouts_are_the_1_24_ones(hlml_lib: Path) -> None:
    from pyhlml import pyhlml_types_generated as types

    assert control.layout_problems(hlml_lib) == []
    assert ctypes.sizeof(types.c_hlml_pci_info) == 84
    assert ctypes.sizeof(types.c_hlml_utilization) == 8


def test_eight_devices_exact_values(hlml_backends: Make, hlml_inprocess: FakeHlml) -> None:
    backend = started(hlml_backends)
    assert [a.info for a in backend.aips] == [
        {k: v for k, v in expected.info(hlml_inprocess.device(i), i).items() if k in a.info}
        for i, a in enumerate(backend.aips)
    ]
    assert [a.uuid for a in backend.aips] == [control.uuid(i) for i in range(8)]
    got = series(poll(backend))
    for i in range(8):
        want = expected.series(hlml_inprocess.device(i), i)
        assert {k: got.get(k) for k in want} == want
    assert got[key("accel_clock_throttle_active", reason="thermal", **me(2))] == 1
    assert got[key("accel_gaudi_nic_port_up", port="5", **me(4))] == 0
    assert got[key("accel_power_watts", **me(0))] == 250.123  # mW divided, exactly


def test_not_supported_fields_are_absent(hlml_backends: Make, hlml_inprocess: FakeHlml) -> None:
    hlml_inprocess.rule("hlml_device_get_power_usage", device=1, error=control.NOT_SUPPORTED)
    hlml_inprocess.rule("hlml_device_get_total_ecc_errors", error=control.NOT_SUPPORTED)
    hlml_inprocess.rule("hlml_nic_get_statistics", device=0, error=control.NOT_SUPPORTED)
    backend = started(hlml_backends)
    reply = poll(backend)
    assert all(d["up"] for d in reply["devices"])
    got = series(reply)
    names = {(m, dict(labels).get("device")) for m, labels in got}
    assert ("accel_power_watts", "1") not in names
    assert not [m for m, _ in names if m == "accel_ecc_errors_total"]
    assert ("accel_gaudi_nic_statistic_total", "0") not in names
    assert ("accel_gaudi_nic_statistic_total", "1") in names
    # An unsupported sensor (OTHER, VRM, CTEMP here) is simply not there.
    assert key("accel_temperature_celsius", sensor="other", **me(0)) not in got
    assert got[key("accel_power_watts", **me(2))] == 252.123


def test_sentinels_and_garbage(hlml_backends: Make, hlml_inprocess: FakeHlml) -> None:
    d0, d1 = hlml_inprocess.device(0), hlml_inprocess.device(1)
    d0.power_mw = 0xFFFFFFFF
    d0.util_aip = 255
    d0.temp[0] = 5000
    d0.ecc[1][0] = -1  # all ones through pyhlml's signed type
    d0.mem_used = d0.mem_total + 1
    d0.pcie_gen = 0xFFFFFFFF
    d1.name = b"HL-\xff\x07225"
    d1.serial = b""
    backend = started(hlml_backends)
    assert backend.aips[1].info["model"] == "HL-\ufffd225"
    got = series(poll(backend))
    for metric, labels in (
        ("accel_power_watts", {}),
        ("accel_utilization_ratio", {}),
        ("accel_temperature_celsius", {"sensor": "gpu"}),
        ("accel_ecc_errors_total", {"type": "uncorrected", "counter": "volatile"}),
        ("accel_memory_used_bytes", {}),
        ("accel_pcie_link_generation", {}),
    ):
        assert key(metric, **labels, **me(0)) not in got, metric
    assert got[key("accel_ecc_errors_total", type="corrected", counter="volatile", **me(0))] == 5


def test_energy_counter_going_backwards_is_a_clean_reset(
    hlml_backends: Make, hlml_inprocess: FakeHlml
) -> None:
    backend = started(hlml_backends)
    joules = key("accel_energy_joules_total", **me(0))
    first = series(poll(backend, slow=False))[joules]
    hlml_inprocess.device(0).energy_mj = 5_000  # the driver reloaded: 5 J since then
    assert series(poll(backend, slow=False))[joules] == first
    hlml_inprocess.device(0).energy_mj = 7_000
    assert series(poll(backend, slow=False))[joules] == first + 2.0


def test_a_lost_device_is_down_and_the_others_read(
    hlml_backends: Make, hlml_inprocess: FakeHlml
) -> None:
    backend = started(hlml_backends)
    hlml_inprocess.device(6).lost = 1
    reply = poll(backend)
    assert reply["devices"][6] == {"uuid": control.uuid(6), "up": False, "reason": "gpu_lost"}
    assert sum(d["up"] for d in reply["devices"]) == 7
    got = series(reply)
    assert not [k for k in got if dict(k[1]).get("device") == "6"]
    hlml_inprocess.device(6).lost = 0
    assert poll(backend)["devices"][6]["up"] is True


def test_a_device_lost_before_the_start_is_listed_down(
    hlml_backends: Make, hlml_inprocess: FakeHlml
) -> None:
    hlml_inprocess.rule("hlml_device_get_uuid", device=4, error=control.AIP_IS_LOST)
    backend = started(hlml_backends)
    assert backend.aips[4].uuid == "gaudi-4"
    reply = poll(backend)
    assert reply["devices"][4] == {"uuid": "gaudi-4", "up": False, "reason": "gpu_lost"}
    assert sum(d["up"] for d in reply["devices"]) == 7
    hlml_inprocess.clear_rules()
    with pytest.raises(InventoryChanged):
        poll(backend)


def test_unavailable_without_driver_or_library(
    hlml_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAKE_HLML_STATE", raising=False)
    assert unavailable(HlmlBackend, hlml_lib).reason == "driver_not_loaded"
    missing = tmp_path / "habanalabs" / "libhlml.so"
    no_library = unavailable(HlmlBackend, missing)
    assert no_library.reason == "library_not_found" and str(missing) in no_library.detail
