"""The amdsmi backend in this process, driving the real amdsmi package against the fake library."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.backends import amdsmi as amdsmi_backend
from exporter.backends.amdsmi import AmdSmiBackend
from exporter.backends.base import BackendError, BackendUnavailable
from exporter.catalog import CATALOG
from exporter.workers.protocol import encode
from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.backend_harness import key, poll, readings, series, started, values
from tests.helpers.wait import eventually

Make = Callable[..., AmdSmiBackend]


@pytest.fixture
def make(amdsmi_backends: Make) -> Make:
    return amdsmi_backends


def up_series(reply: dict[str, Any], uuids: dict[str, str]) -> dict[expected.Series, float]:
    out = {}
    for dev in reply["devices"]:
        labels = (("device", uuids[dev["uuid"]]), ("uuid", dev["uuid"]))
        out[("accel_device_up", labels)] = 1.0 if dev["up"] else 0.0
    return out


def test_inventory_identifies_every_gpu(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    inventory = make().bootstrap()
    assert inventory["vendor"] == "amd"
    assert len(inventory["devices"]) == 8
    for i, item in enumerate(inventory["devices"]):
        want = expected.info(amdsmi_inprocess.device(i), i)
        assert item["device"] == str(i)
        assert item["uuid"] == want["uuid"]
        assert item["info"] == {
            k: want[k]
            for k in (
                "model",
                "pci_bus_id",
                "serial",
                "vbios",
                "driver_version",
                "compute_partition",
                "memory_partition",
            )
        }


def test_poll_gives_exact_values_for_every_device(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    backend = make()
    inventory = backend.bootstrap()
    reply = poll(backend, processes=True)
    assert [d["up"] for d in reply["devices"]] == [True] * 8
    uuids = {d["uuid"]: d["device"] for d in inventory["devices"]}
    got = {**series(reply), **up_series(reply, uuids)}
    want: dict[expected.Series, float] = {}
    for i in range(8):
        want.update(expected.series(amdsmi_inprocess.device(i), i, processes=True))
    assert got == want
    for metric in [*reply["readings"], *reply["slow_readings"]]:
        assert metric in CATALOG


def test_slow_fields_only_when_asked_and_processes_behind_the_flag(make: Make) -> None:
    backend = started(make)
    reply = poll(backend, slow=False)
    assert "slow_readings" not in reply
    metrics = set(reply["readings"])
    assert "accel_ecc_errors_total" not in metrics
    assert not metrics & {"accel_processes", "accel_process_memory_bytes"}


def test_na_and_unsupported_fields_are_omitted_not_exported(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(3)
    dev.umc_activity = state.U16_NA
    dev.socket_power = dev.current_socket_power = dev.average_socket_power = state.U16_NA
    dev.xgmi_read_kb[2] = state.U64_NA
    amdsmi_inprocess.rule("amdsmi_get_clock_info", state.NOT_SUPPORTED, device=3, arg=3)  # SOC
    backend = started(make)
    got = series(poll(backend))
    mine = {k: v for k, v in got.items() if ("device", "3") in k[1]}
    names = {k[0] for k in mine}
    assert "accel_memory_bandwidth_utilization_ratio" not in names
    assert "accel_power_watts" not in names
    assert "accel_amd_mm_activity_ratio" not in names  # N/A on MI300X
    assert not any(k[0] == "accel_temperature_celsius" and ("sensor", "edge") in k[1] for k in mine)
    assert not any(k[0] == "accel_clock_hertz" and ("clock", "soc") in k[1] for k in mine)
    assert any(k[0] == "accel_clock_hertz" and ("clock", "graphics") in k[1] for k in mine)
    links = {dict(k[1])["link"] for k in mine if k[0] == "accel_amd_xgmi_read_bytes_total"}
    assert links == {"0", "1", "3", "4", "5", "6"}
    # Everything else of the device, and every other device, is still there.
    assert mine[("accel_utilization_ratio", (("device", "3"), ("uuid", expected.uuid(dev))))] == (
        dev.gfx_activity / 100
    )
    assert sum(1 for k in got if k[0] == "accel_power_watts") == 7


def test_non_finite_values_are_omitted_and_the_reply_stays_sendable(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    amdsmi_inprocess.device(1).energy_resolution = float("inf")
    amdsmi_inprocess.device(2).energy_resolution = float("nan")
    backend = started(make)
    reply = poll(backend)
    encode({"type": "result", "id": 1, "result": reply})  # JSON has no NaN or infinity
    assert all(d["up"] for d in reply["devices"])
    energy = {k for k in series(reply) if k[0] == "accel_energy_joules_total"}
    assert {dict(k[1])["device"] for k in energy} == {"0", "3", "4", "5", "6", "7"}


def test_pcie_generations_from_gts_rates_and_the_interface_version(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    gts = amdsmi_inprocess.device(1)  # a build that reports GT/s
    gts.pcie_speed, gts.pcie_max_speed = 16, 32
    unstated = amdsmi_inprocess.device(2)  # no interface version: from the maximum rate
    unstated.pcie_interface_version, unstated.pcie_max_speed = 0xFFFFFFFF, 16000
    backend = started(make)
    got = series(poll(backend))

    def gen(metric: str, dev: Any, i: int) -> float | None:
        return got.get((metric, (("device", str(i)), ("uuid", expected.uuid(dev)))))

    assert gen("accel_pcie_link_generation", gts, 1) == 4
    assert gen("accel_pcie_link_max_generation", gts, 1) == 5
    assert gen("accel_pcie_link_max_generation", unstated, 2) == 4


FANS = [  # (speed, max) the library gives -> the ratio exported, None for none
    ((120, 255), 120 / 255),
    ((0, 255), 0.0),
    ((-1, 255), None),  # int64 all ones
    ((0xFFFF, 255), None),
    ((0xFFFFFFFF, 255), None),
    ((120, -1), None),  # the maximum as uint64 all ones
    ((300, 255), None),  # above its maximum: not clamped into a plausible 1.0
    ((120, 0), None),
]


@pytest.mark.parametrize(("fan", "ratio"), FANS)
def test_fan_speed_is_a_ratio_of_its_maximum_and_na_is_omitted(
    make: Make, amdsmi_inprocess: FakeAmdSmi, fan: tuple[int, int], ratio: float | None
) -> None:
    dev = amdsmi_inprocess.device(2)
    dev.fan_supported = 1
    dev.fan_speed, dev.fan_max = fan
    backend = started(make)
    got = series(poll(backend))
    uuid = expected.uuid(dev)
    assert got.get(key("accel_fan_speed_ratio", device="2", uuid=uuid, fan="0")) == ratio
    assert got[key("accel_utilization_ratio", device="2", uuid=uuid)] == dev.gfx_activity / 100


def test_a_16_bit_na_clock_is_omitted(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    # Builds that fill clk and max_clk from gpu_metrics' uint16 fields give 0xFFFF for N/A.
    dev = amdsmi_inprocess.device(4)
    dev.clk[6] = dev.clk_max[6] = 0xFFFF  # VCLK0
    backend = started(make)
    got = series(poll(backend))
    ident = {"device": "4", "uuid": expected.uuid(dev)}
    for metric in ("accel_clock_hertz", "accel_clock_max_hertz"):
        assert key(metric, clock="video", **ident) not in got
        assert got[key(metric, clock="graphics", **ident)] == 2100 * 10**6
    other = {"device": "3", "uuid": expected.uuid(amdsmi_inprocess.device(3))}
    assert got[key("accel_clock_hertz", clock="video", **other)] == 914 * 10**6


def test_power_limit_falls_back_to_the_power_cap(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    dev = amdsmi_inprocess.device(1)
    dev.power_limit = state.U16_NA
    dev.power_cap_uw = 561_500_000
    backend = started(make)
    got = series(poll(backend))
    assert got[key("accel_power_limit_watts", device="1", uuid=expected.uuid(dev))] == 561.5


@pytest.mark.parametrize(
    "code", [state.DRIVER_NOT_LOADED, state.NOT_FOUND, state.IO, state.FILE_ERROR]
)
def test_lost_device_is_down_others_unaffected_and_it_comes_back(
    make: Make, amdsmi_inprocess: FakeAmdSmi, code: int
) -> None:
    backend = started(make)
    amdsmi_inprocess.device(5).lost_status = code
    reply = poll(backend)
    states = [(d["up"], d["reason"]) for d in reply["devices"]]
    assert states[5] == (False, "gpu_lost")
    assert all(s == (True, "") for i, s in enumerate(states) if i != 5)
    lost_uuid = reply["devices"][5]["uuid"]
    assert not any(r.labels[1] == lost_uuid for r in readings(reply))
    amdsmi_inprocess.device(5).lost_status = 0
    assert poll(backend)["devices"][5] == {"uuid": lost_uuid, "up": True, "reason": ""}


@pytest.mark.parametrize(
    ("func", "slow"),
    [
        ("amdsmi_get_violation_status", False),  # the last fast read
        ("amdsmi_get_gpu_ecc_count", True),  # slow, after every fast read and the ECC total
    ],
)
def test_device_lost_half_way_through_a_poll_has_none_of_its_rows(
    make: Make, amdsmi_inprocess: FakeAmdSmi, func: str, slow: bool
) -> None:
    backend = started(make)
    full = values(poll(backend, slow=slow))
    assert len([k for k in full if k[1][0] == "3"]) > 40
    amdsmi_inprocess.rule(func, state.IO, device=3)
    reply = poll(backend, slow=slow)
    assert reply["devices"][3]["up"] is False and reply["devices"][3]["reason"] == "gpu_lost"
    got = values(reply)
    assert not [k for k in got if k[1][0] == "3"]
    for other in ("2", "4"):
        assert {k for k in got if k[1][0] == other} == {k for k in full if k[1][0] == other}


def test_device_answering_only_errors_is_down_with_that_reason(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    backend = started(make)
    amdsmi_inprocess.rule("*", state.NO_PERM, device=2)
    amdsmi_inprocess.rule("amdsmi_get_power_info", state.BUSY, device=4)
    reply = poll(backend)
    assert reply["devices"][2]["up"] is False
    assert reply["devices"][2]["reason"] == "no_perm"
    # One failing field on device 4 costs that field only.
    assert reply["devices"][4]["up"] is True
    dev4 = [r.metric for r in readings(reply) if r.labels[0] == "4"]
    assert "accel_power_watts" not in dev4 and "accel_energy_joules_total" in dev4


def test_malformed_identity_field_loses_only_that_field(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(0)
    dev.asic_serial = b"not-hex"  # the wrapper does int(serial, 16) on it
    dev.board_serial = b""
    inventory = make().bootstrap()
    info = inventory["devices"][0]["info"]
    assert info["serial"] == ""
    assert info["model"] == "AMD Instinct MI300X"  # from the board info instead
    assert info["pci_bus_id"] == expected.pci_bus_id(dev)


def test_a_lost_partition_keeps_its_own_address(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    """A partition alone on its socket (the fake's layout) keeps its own function's
    address, never its GPU's: partitions differ only in the function number."""
    state.cpx(amdsmi_inprocess, gpus=1)
    amdsmi_inprocess.device(3).lost_status = state.DRIVER_NOT_LOADED
    devices = make().bootstrap()["devices"]
    assert devices[3]["uuid"] == "amd-gpu-3"
    own = expected.pci_bus_id(amdsmi_inprocess.device(3)).lower()
    assert own.endswith(".3")
    assert devices[3]["info"] == {"pci_bus_id": own}


def test_duplicate_uuids_are_made_unique(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    amdsmi_inprocess.device(3).uuid = amdsmi_inprocess.device(2).uuid
    uuids = [d["uuid"] for d in make().bootstrap()["devices"]]
    same = expected.uuid(amdsmi_inprocess.device(2))
    assert uuids[2:4] == [same, f"{same}-3"]
    assert len(set(uuids)) == 8


def test_lost_at_enumeration_still_listed(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    amdsmi_inprocess.device(7).lost_status = state.DRIVER_NOT_LOADED
    backend = make()
    inventory = backend.bootstrap()
    assert len(inventory["devices"]) == 8
    assert inventory["devices"][7]["uuid"] == "amd-gpu-7"
    # Its address as the socket layout names it (read at init, not from the device):
    # what tells which PCI function, and so which DRA device, it is.
    pci_bus_id = expected.pci_bus_id(amdsmi_inprocess.device(7)).lower()
    assert inventory["devices"][7]["info"] == {"pci_bus_id": pci_bus_id}
    assert poll(backend)["devices"][7]["reason"] == "gpu_lost"
    # It answers again: a fast poll shows it up under its placeholder, the next
    # slow poll asks for a new worker, which lists it with its real identity.
    amdsmi_inprocess.device(7).lost_status = 0
    assert poll(backend, slow=False)["devices"][7] == {
        "uuid": "amd-gpu-7",
        "up": True,
        "reason": "",
    }
    with pytest.raises(BackendError) as changed:
        poll(backend)
    assert changed.value.reason == "inventory_changed"
    backend.close()
    again = make().bootstrap()["devices"][7]
    want = expected.info(amdsmi_inprocess.device(7), 7)
    assert (again["uuid"], again["info"]["model"]) == (want["uuid"], want["model"])


def driver_roots(root: Path, *, module: bool, kfd: bool) -> dict[str, str]:
    """sys_path/dev_path config for a node with (or without) the amdgpu driver's marks."""
    (root / "sys" / "module").mkdir(parents=True)
    (root / "dev").mkdir()
    if module:
        (root / "sys" / "module" / "amdgpu").mkdir()
    if kfd:
        (root / "dev" / "kfd").touch()
    return {"sys_path": str(root / "sys"), "dev_path": str(root / "dev")}


@pytest.mark.parametrize(
    ("init_status", "module", "kfd", "error", "reason"),
    [
        (state.DRIVER_NOT_LOADED, True, True, BackendUnavailable, "driver_not_loaded"),
        # amdgpu present: INIT_ERROR is a fault of this node.
        (state.INIT_ERROR, True, True, BackendError, "init_failed"),
        # No amdgpu (what amdsmi_init answers then is rocm_smi's status, not
        # DRIVER_NOT_LOADED): not an AMD node, or the container lacks /dev/kfd.
        (state.INIT_ERROR, False, False, BackendUnavailable, "driver_not_loaded"),
        (state.INIT_ERROR, True, False, BackendUnavailable, "driver_not_loaded"),
        (state.INIT_ERROR, False, True, BackendUnavailable, "driver_not_loaded"),
    ],
)
def test_init_failures(
    make: Make,
    amdsmi_inprocess: FakeAmdSmi,
    tmp_path: Path,
    init_status: int,
    module: bool,
    kfd: bool,
    error: type,
    reason: str,
) -> None:
    amdsmi_inprocess.state.init_status = init_status
    with pytest.raises(error) as info:
        make(**driver_roots(tmp_path, module=module, kfd=kfd)).bootstrap()
    assert type(info.value) is error
    assert info.value.reason == reason
    if error is BackendUnavailable and init_status == state.INIT_ERROR:
        assert "kfd" in info.value.detail or "amdgpu" in info.value.detail


def test_no_gpu_is_unavailable_not_an_error(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    amdsmi_inprocess.state.device_count = 0
    with pytest.raises(BackendUnavailable) as info:
        make().bootstrap()
    assert info.value.reason == "no_devices"


def _events(reply: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {
        (r.labels[0], r.labels[2]): r.value
        for r in readings(reply)
        if r.metric == "accel_device_events_total"
    }


def test_events_are_counted_per_device_and_type(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    backend = started(make, events=True)
    before = time.time()
    amdsmi_inprocess.push_event(1, state.EVT_VMFAULT, "pid=4242")
    amdsmi_inprocess.push_event(1, state.EVT_VMFAULT, "pid=4242")
    amdsmi_inprocess.push_event(6, state.EVT_GPU_PRE_RESET, "reset")
    amdsmi_inprocess.push_event(6, state.EVT_PROCESS_START, "pid=1")  # not subscribed
    eventually(lambda: len(_events(poll(backend))) >= 2, what="both devices' events")
    reply = poll(backend)
    assert _events(reply) == {("1", "vmfault"): 2, ("6", "gpu_pre_reset"): 1}
    stamps = [
        r.value for r in readings(reply) if r.metric == "accel_device_event_last_timestamp_seconds"
    ]
    assert len(stamps) == 2 and all(before <= s <= time.time() for s in stamps)
    assert amdsmi_inprocess.state.event_head == amdsmi_inprocess.state.event_tail
    # A device found lost keeps its event counters: they are what explains it.
    amdsmi_inprocess.device(6).lost_status = state.DRIVER_NOT_LOADED
    lost = poll(backend)
    assert lost["devices"][6]["up"] is False
    assert _events(lost)[("6", "gpu_pre_reset")] == 1
    assert not [r for r in readings(lost) if r.metric == "accel_power_watts" and r.labels[0] == "6"]


def test_event_types_are_configurable(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    backend = started(make, events=True, event_types=["process_start"])
    amdsmi_inprocess.push_event(0, state.EVT_VMFAULT)
    amdsmi_inprocess.push_event(0, state.EVT_PROCESS_START)
    eventually(lambda: _events(poll(backend)), what="the subscribed event")
    assert _events(poll(backend)) == {("0", "process_start"): 1}


def test_an_explicit_empty_event_type_list_means_none(make: Make) -> None:
    backend = started(make, events=True, event_types=[])
    assert backend.events is not None and backend.events.registered == 0
    backend.close()
    defaults = make(events=True)  # no key at all: the default types
    defaults.bootstrap()
    assert defaults.events is not None and defaults.events.registered == 8


def test_a_hung_event_wait_never_delays_polls(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    amdsmi_inprocess.rule("amdsmi_get_gpu_event_notification", hang=True, times=1)
    backend = started(make, events=True)
    amdsmi_inprocess.wait(lambda: amdsmi_inprocess.state.hung_now == 1)
    done = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["reply"] = poll(backend)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(20), "a poll waited for the hung event reader"
    assert all(d["up"] for d in result["reply"]["devices"])
    amdsmi_inprocess.release_hangs()


def test_event_read_returning_at_once_does_not_spin(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    # rocm_smi answers NO_DATA at once after its event file reported a hang-up.
    many = 10**6
    slot = amdsmi_inprocess.rule("amdsmi_get_gpu_event_notification", 40, times=many)  # NO_DATA
    backend = started(make, events=True)
    assert backend.events is not None
    rule = amdsmi_inprocess.state.rules[slot]
    reads, cpu, wall = many - rule.remaining, time.process_time(), time.monotonic()
    time.sleep(1.5)
    reads = many - rule.remaining - reads
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert reads <= wall / (backend.events.wait_ms / 1000) + 2
    assert cpu / wall < 0.5


def test_close_leaves_the_readers_of_a_hung_event_wait_alone(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    amdsmi_inprocess.rule("amdsmi_get_gpu_event_notification", hang=True, times=1)
    backend = started(make, events=True)
    amdsmi_inprocess.wait(lambda: amdsmi_inprocess.state.hung_now == 1)
    calls = amdsmi_inprocess.state.calls
    backend.close()
    # rocm_smi would fclose the event files the blocked thread reads: no stop call.
    assert amdsmi_inprocess.state.calls == calls
    amdsmi_inprocess.release_hangs()


def test_older_package_without_some_functions_and_types_omits_those_fields(
    make: Make, amdsmi_inprocess: FakeAmdSmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    import amdsmi

    # An older amdsmi: these names are missing from the module, and its enums lack
    # some members (the real package itself is untouched; values come from its
    # real functions and the fake library).
    lacking = {"amdsmi_get_violation_status", "amdsmi_get_gpu_fan_speed_max"}
    older = types.ModuleType("amdsmi")
    older.__dict__.update({k: v for k, v in vars(amdsmi).items() if k not in lacking})

    def without(enum: Any, name: str) -> Any:
        return types.SimpleNamespace(
            __members__={k: m for k, m in enum.__members__.items() if k != name}
        )

    older.AmdSmiClkType = without(amdsmi.AmdSmiClkType, "VCLK0")
    older.AmdSmiTemperatureType = without(amdsmi.AmdSmiTemperatureType, "HBM_3")
    monkeypatch.setattr(amdsmi_backend, "load_amdsmi", lambda: older)
    backend = started(make)
    assert set(backend.api.lacking) == {
        *lacking,
        "AmdSmiClkType.VCLK0",
        "AmdSmiTemperatureType.HBM_3",
    }
    reply = poll(backend, processes=True)
    assert all(d["up"] for d in reply["devices"])
    got = series(reply)
    dev = amdsmi_inprocess.device(0)
    want = expected.series(dev, 0, processes=True)
    gone = {
        k
        for k in want
        if k[0] == "accel_clock_throttle_active"
        or (k[0].startswith("accel_clock") and ("clock", "video") in k[1])
        or (k[0] == "accel_temperature_celsius" and ("sensor", "hbm_3") in k[1])
    }
    assert gone  # the test removes something the fake serves
    assert {k: v for k, v in got.items() if ("device", "0") in k[1]} == {
        k: v for k, v in want.items() if k not in gone and k[0] != "accel_device_up"
    }


def test_unknown_operation_is_an_error(make: Make) -> None:
    backend = started(make)
    with pytest.raises(BackendError):
        backend.handle("reset", {})
