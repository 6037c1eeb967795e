"""The levelzero backend in this process, driving the real pyzes against the fake loader.

pyzes binds its library once per process (at import), so every test here shares
the session's fake loader; each test's state file is chosen at zesInit.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from exporter.backends import levelzero_binding as zb
from exporter.backends.base import InventoryChanged
from exporter.backends.levelzero import LevelZeroBackend
from tests.fakes.levelzero import control, expected
from tests.fakes.levelzero.control import FakeZe
from tests.helpers.backend_harness import Backends, key, poll, series, started, unavailable

Make = Backends[LevelZeroBackend]


def test_layouts_agree_with_the_spec_and_the_fake(ze_lib: Path) -> None:
    assert control.layout_problems(ze_lib) == []
    sizes = {
        zb.DeviceState: 24,
        zb.RasProperties: 32,
        zb.RasState: 72,
        zb.RasStateExp: 16,
        zb.FabricPortProperties: 328,
        zb.FabricPortState: 72,
        zb.FabricPortThroughput: 24,
    }
    assert {cls.__name__: ctypes.sizeof(cls) for cls in sizes} == {
        cls.__name__: size for cls, size in sizes.items()
    }
    assert zb.FabricPortProperties.maxRxSpeed.offset == 296
    assert zb.FabricPortState.rxSpeed.offset == 40


def test_four_gpus_exact_values(ze_backends: Make, ze_inprocess: FakeZe) -> None:
    backend = started(ze_backends)
    inventory_uuids = [g.uuid for g in backend.gpus]
    assert inventory_uuids == [control.uuid(i) for i in range(4)]
    assert backend.gpus[1].info == {
        k: v
        for k, v in expected.info(ze_inprocess.device(1), 1).items()
        if k in backend.gpus[1].info
    }
    first = series(poll(backend))
    # The first poll has no previous sample: no rates yet, the rest already.
    assert key("accel_power_watts", device="0", uuid=control.uuid(0)) not in first
    second = series(poll(backend))
    for i in range(4):
        dev = ze_inprocess.device(i)
        want = expected.series(dev, i)
        assert {k: second.get(k) for k in want} == want
        me = {"device": str(i), "uuid": control.uuid(i)}
        # Two polls: the counters moved by two steps from where the fake started.
        start_uj = 22_000_000_000 + i * 1_000_000_000
        assert second[key("accel_energy_joules_total", **me)] == (
            (start_uj + 2 * dev.energy_step_uj) / 1e6
        )
        assert second[key("accel_intel_memory_read_bytes_total", **me)] == 2 << 20
        assert (
            second[key("accel_intel_fabric_rx_bytes_total", port=f"{i + 1}.0.1", **me)] == 2 * 4096
        )
    up = [d["up"] for d in poll(backend)["devices"]]
    assert up == [True] * 4


def test_energy_counter_that_drops_and_comes_back(ze_backends: Make, ze_inprocess: FakeZe) -> None:
    backend = started(ze_backends)
    me = {"device": "0", "uuid": control.uuid(0)}
    watts, joules = (
        key("accel_power_watts", **me),
        key("accel_energy_joules_total", **me),
    )
    poll(backend, slow=False)
    before = series(poll(backend, slow=False))
    assert before[watts] == 300.0
    dev = ze_inprocess.device(0)
    real = dev.energy_uj
    dev.energy_uj = 200_000_000  # the ~200 J of compute-runtime#938
    dropped = series(poll(backend, slow=False))
    assert watts not in dropped  # no power from a counter that went backwards
    assert dropped[joules] == before[joules]  # and the total does not go back either
    after = series(poll(backend, slow=False))
    assert after[watts] == 300.0 and after[joules] == before[joules] + 300.0
    dev.energy_uj = real + 10 * dev.energy_step_uj  # back: a jump of ~22 MJ in a second
    back = series(poll(backend, slow=False))
    assert watts not in back and back[joules] == after[joules]
    final = series(poll(backend, slow=False))
    assert final[watts] == 300.0 and final[joules] == after[joules] + 300.0


def test_activity_counters_going_backwards_give_no_ratio(
    ze_backends: Make, ze_inprocess: FakeZe
) -> None:
    backend = started(ze_backends)
    poll(backend, slow=False)
    zero = {"device": "0", "uuid": control.uuid(0)}
    compute = key("accel_intel_engine_utilization_ratio", engine="compute", **zero)
    assert series(poll(backend, slow=False))[compute] == 0.625
    ze_inprocess.device(0).engine_active[1][1] = 0  # tile 1's compute counter reset
    ze_inprocess.device(0).pci_rx = 0
    got = series(poll(backend, slow=False))
    assert compute not in got  # not tile 0's ratio passed off as the device's
    assert key("accel_utilization_ratio", **zero) not in got
    assert key("accel_pcie_rx_bytes_per_second", **zero) not in got
    assert got[key("accel_intel_engine_utilization_ratio", engine="render", **zero)] == 0.375
    assert series(poll(backend, slow=False))[compute] == 0.625


def test_unsupported_and_denied_readings_are_absent(
    ze_backends: Make, ze_inprocess: FakeZe
) -> None:
    # The xe driver as non-root: engines and temperatures refused on device 1.
    ze_inprocess.rule("zesDeviceEnumEngineGroups", device=1, error=control.INSUFFICIENT_PERMISSIONS)
    ze_inprocess.rule("zesTemperatureGetState", device=1, error=control.INSUFFICIENT_PERMISSIONS)
    ze_inprocess.rule("zesDevicePciGetStats", device=2, error=control.UNSUPPORTED_FEATURE)
    ze_inprocess.rule(
        "zesDeviceEnumRasErrorSets", device=2, error=0x7800000D
    )  # UNSUPPORTED_ENUMERATION
    backend = started(ze_backends)
    poll(backend)
    reply = poll(backend)
    assert [d["up"] for d in reply["devices"]] == [True] * 4
    got = series(reply)
    one = {"device": "1", "uuid": control.uuid(1)}
    names = {(m, dict(labels).get("device")) for m, labels in got}
    assert ("accel_utilization_ratio", "1") not in names
    assert ("accel_intel_engine_utilization_ratio", "1") not in names
    assert ("accel_temperature_celsius", "1") not in names
    assert got[key("accel_intel_reading_denied_info", reading="engines", **one)] == 1
    assert got[key("accel_intel_reading_denied_info", reading="temperature", **one)] == 1
    assert ("accel_intel_reading_denied_info", "2") not in names  # unsupported is not denied
    assert ("accel_pcie_replays_total", "2") not in names
    assert ("accel_pcie_rx_bytes_per_second", "2") not in names
    assert ("accel_intel_ras_correctable_errors_total", "2") not in names
    assert got[key("accel_power_watts", **one)] == 310.0  # the rest of device 1 is there


def test_sentinels_garbage_and_non_gpus(ze_backends: Make, ze_inprocess: FakeZe) -> None:
    d0, d1, d2 = (ze_inprocess.device(i) for i in range(3))
    d0.freq_actual[0] = -1.0  # "unknown"
    d0.temp[1] = -1.0
    d0.temp[2] = float("nan")
    d0.pci_gen = -1
    d0.pci_max_width = -1
    d0.have_bandwidth = 0  # the rx/tx counters read 0: not known, not idle
    d1.model = b"\xff\xfeMax\x01 1100"  # not UTF-8, with a control character
    d1.serial = b"unknown"
    d2.mem_free[0] = d2.mem_size[0] + 1  # more free than the module holds: garbage
    ze_inprocess.device(3).type = 5  # an NPU behind the same loader
    backend = started(ze_backends)
    assert [g.uuid for g in backend.gpus] == [control.uuid(i) for i in range(3)]
    assert backend.gpus[1].info["model"] == "\ufffd\ufffdMax 1100"
    assert backend.gpus[1].info["serial"] == ""
    poll(backend)
    got = series(poll(backend))
    zero = {"device": "0", "uuid": control.uuid(0)}
    assert key("accel_clock_hertz", clock="graphics", **zero) not in got
    assert got[key("accel_clock_hertz", clock="memory", **zero)] == 3.2e9
    assert key("accel_temperature_celsius", sensor="gpu", **zero) not in got
    assert key("accel_temperature_celsius", sensor="memory", **zero) not in got
    assert key("accel_pcie_link_generation", **zero) not in got
    assert key("accel_pcie_link_max_width", **zero) not in got
    assert key("accel_pcie_rx_bytes_per_second", **zero) not in got
    assert got[key("accel_pcie_replays_total", **zero)] == 3  # its own flag is set
    two = {"device": "2", "uuid": control.uuid(2)}
    assert key("accel_memory_used_bytes", **two) not in got
    assert key("accel_memory_free_bytes", **two) not in got


def test_a_lost_device_is_down_and_the_others_read(ze_backends: Make, ze_inprocess: FakeZe) -> None:
    backend = started(ze_backends)
    poll(backend)
    ze_inprocess.device(2).lost = 1
    reply = poll(backend)
    assert reply["devices"][2] == {"uuid": control.uuid(2), "up": False, "reason": "gpu_lost"}
    assert [d["up"] for d in reply["devices"]] == [True, True, False, True]
    got = series(reply)
    assert not [k for k in got if dict(k[1]).get("device") == "2"]
    assert got[key("accel_power_watts", device="3", uuid=control.uuid(3))] == 330.0
    ze_inprocess.device(2).lost = 0
    assert poll(backend)["devices"][2]["up"] is True


def test_a_device_lost_before_the_start_is_listed_down(
    ze_backends: Make, ze_inprocess: FakeZe
) -> None:
    ze_inprocess.device(1).lost = 1
    backend = started(ze_backends)
    assert backend.gpus[1].uuid == "intel-gpu-1"
    reply = poll(backend)
    assert reply["devices"][1] == {"uuid": "intel-gpu-1", "up": False, "reason": "gpu_lost"}
    ze_inprocess.device(1).lost = 0
    assert poll(backend, slow=False)["devices"][1]["up"] is False  # asked again on slow polls
    with pytest.raises(InventoryChanged):  # a new worker describes it properly
        poll(backend)


def test_isolation_skips_and_probes_by_library_index(
    ze_backends: Make, ze_inprocess: FakeZe
) -> None:
    backend = started(ze_backends, isolation={"skip": [1]})
    assert [(g.device, g.index) for g in backend.gpus] == [("0", 0), ("2", 2), ("3", 3)]
    probe = started(ze_backends, isolation={"only": [1]})
    assert [g.uuid for g in probe.gpus] == [control.uuid(1)]


def test_without_a_driver_or_library_it_is_unavailable(
    ze_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAKE_ZE_STATE", raising=False)  # the loader finds no driver
    assert unavailable(LevelZeroBackend, ze_lib).reason == "driver_not_loaded"
    missing = tmp_path / "lib64" / "libze_loader.so.1"
    no_library = unavailable(LevelZeroBackend, missing)
    assert no_library.reason == "library_not_found" and str(missing) in no_library.detail
