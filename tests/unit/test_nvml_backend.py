"""The NVML backend in-process, driving the real pynvml against the fake library.

pynvml loads one libnvidia-ml.so.1 per process for good, so every test here
shares one fake (pre-loaded by absolute path, SONAME trick) and resets its
state; scenarios that need a process of their own live in tests/e2e.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest
from structlog.testing import capture_logs

from exporter.backends import nvml as nvml_backend
from exporter.backends import nvml_support as nv
from exporter.backends.base import BackendError, BackendUnavailable
from exporter.backends.nvml import NvmlBackend
from exporter.sources.device import parse_inventory
from tests.fakes.nvml import control
from tests.fakes.nvml.control import FakeNvml, MigInstance, Process
from tests.helpers.backend_harness import Backends, backends, poll, started, values
from tests.helpers.wait import eventually


@pytest.fixture
def fake(nvml_shared) -> Iterator[FakeNvml]:
    nvml_shared.reset(2)
    yield nvml_shared
    nvml_shared.clear_rules()
    nvml_shared.release()


@pytest.fixture
def backend() -> Iterator[Backends[NvmlBackend]]:
    with backends(NvmlBackend, events=False) as made:
        yield made


def test_inventory_has_identity_and_info_labels(fake, backend):
    b = backend()
    vendor, devices = parse_inventory(b.bootstrap())
    assert vendor == "nvidia"
    assert [d.device for d in devices] == ["0", "1"]
    assert devices[1].uuid == fake.uuid(1)
    info = dict(devices[1].info)
    assert info == {
        "model": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:24:00.0",
        "serial": "1654922001001",
        "vbios": "96.00.99.00.02",
        "driver_version": "580.82.07",
        "cuda_driver_version": "12.8",
        "mig_mode": "disabled",
    }


def test_poll_converts_units_exactly(fake, backend):
    dev = fake.device(0)
    dev.util_gpu, dev.util_memory, dev.util_encoder = 73, 41, 5
    dev.power_mw, dev.power_limit_mw, dev.energy_mj = 287654, 650000, 98765432
    dev.memory_total, dev.memory_reserved, dev.memory_used = 80 << 30, 512 << 20, 3 << 30
    dev.pcie_tx_kbs, dev.pcie_rx_kbs = 1500, 300
    dev.violation_ns[0] = 2_500_000_000
    dev.nvlink_tx_kib[2] = 7
    dev.nvlink_active_mask = 0b101
    dev.ecc[1][1] = 4
    dev.clocks_event_reasons = 0x40
    b = started(backend)
    v = values(poll(b))
    ident = ("0", fake.uuid(0))
    assert v[("accel_utilization_ratio", ident)] == 0.73
    assert v[("accel_memory_bandwidth_utilization_ratio", ident)] == 0.41
    assert v[("accel_encoder_utilization_ratio", ident)] == 0.05
    assert v[("accel_power_watts", ident)] == 287.654
    assert v[("accel_power_limit_watts", ident)] == 650.0
    assert v[("accel_energy_joules_total", ident)] == 98765.432
    assert v[("accel_memory_total_bytes", ident)] == 80 * 2**30
    assert v[("accel_memory_reserved_bytes", ident)] == 512 * 2**20
    assert v[("accel_memory_used_bytes", ident)] == 3 * 2**30
    assert v[("accel_memory_free_bytes", ident)] == 80 * 2**30 - 512 * 2**20 - 3 * 2**30
    assert v[("accel_temperature_celsius", (*ident, "gpu"))] == 34
    assert v[("accel_temperature_celsius", (*ident, "memory"))] == 40
    assert v[("accel_clock_hertz", (*ident, "sm"))] == 1755e6
    assert v[("accel_clock_max_hertz", (*ident, "video"))] == 1965e6
    assert v[("accel_pcie_tx_bytes_per_second", ident)] == 1500 * 1024
    assert v[("accel_pcie_rx_bytes_per_second", ident)] == 300 * 1024
    assert v[("accel_clock_violation_seconds_total", (*ident, "sw_power_cap"))] == 2.5
    assert v[("accel_clock_throttle_active", (*ident, "hw_thermal_slowdown"))] == 1
    assert v[("accel_clock_throttle_active", (*ident, "sw_power_cap"))] == 0
    assert v[("accel_ecc_errors_total", (*ident, "uncorrected", "aggregate"))] == 4
    assert v[("accel_nvlink_up", (*ident, "1"))] == 0
    assert v[("accel_nvlink_up", (*ident, "2"))] == 1
    assert v[("accel_nvlink_tx_bytes_total", (*ident, "2"))] == 7 * 1024
    assert ("accel_nvlink_tx_bytes_total", (*ident, "1")) not in v  # link down: not read
    assert v[("accel_performance_state", ident)] == 0
    assert v[("accel_pcie_link_generation", ident)] == 5
    assert v[("accel_retired_pages", (*ident, "double_bit_ecc"))] == 0
    assert v[("accel_remapped_rows", (*ident, "uncorrected"))] == 0


def test_not_supported_and_sentinels_are_omitted_not_exported(fake, backend):
    fake.add_rule("nvmlDeviceGetPowerUsage", device=0, error=control.NOT_SUPPORTED)
    fake.add_rule("field:82", device=0, error=control.NOT_SUPPORTED)
    fake.device(0).clock_mhz[2] = 0xFFFFFFFF
    fake.device(0).util_decoder = 0xFFFFFFFF
    fake.device(0).ecc_enabled = 0
    b = started(backend)
    reply = poll(b)
    assert [d["up"] for d in reply["devices"]] == [True, True]
    v = values(reply)
    ident = ("0", fake.uuid(0))
    assert ("accel_power_watts", ident) not in v
    assert ("accel_temperature_celsius", (*ident, "memory")) not in v
    assert ("accel_clock_hertz", (*ident, "memory")) not in v
    assert ("accel_decoder_utilization_ratio", ident) not in v
    assert not [k for k in v if k[0] == "accel_ecc_errors_total" and k[1][:2] == ident]
    assert not [k for k in v if k[0] == "accel_fan_speed_ratio"]  # datacenter: no fans
    assert ("accel_clock_hertz", (*ident, "sm")) in v
    assert v[("accel_power_watts", ("1", fake.uuid(1)))] == 313.456
    # Not-supported is a fact, not an error: nothing counted.
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_double_field_value_is_omitted_and_the_reply_still_encodes(fake, backend, bad):
    fake.device(0).memory_temp_double = bad  # NVML_FI_DEV_MEMORY_TEMP as valueType 0
    fake.device(1).memory_temp_double = 47.5
    b = started(backend)
    reply = poll(b)
    assert [d["up"] for d in reply["devices"]] == [True, True]
    v = values(reply)  # through the real frame encoding, which refuses NaN and infinity
    assert ("accel_temperature_celsius", ("0", fake.uuid(0), "memory")) not in v
    assert v[("accel_temperature_celsius", ("0", fake.uuid(0), "gpu"))] == 34
    assert v[("accel_temperature_celsius", ("1", fake.uuid(1), "memory"))] == 47.5
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


@pytest.mark.parametrize("code", [control.GPU_IS_LOST, control.RESET_REQUIRED])
@pytest.mark.parametrize("slow", [True, False])
def test_gpu_lost_half_way_through_a_poll_has_none_of_its_rows(fake, backend, code, slow):
    b = started(backend)
    poll(b, slow=slow)  # GPM figures need a previous sample
    full = values(poll(b, slow=slow))
    ident0 = ("0", fake.uuid(0))
    assert len([k for k in full if k[1][:2] == ident0]) > 40
    # The process lists are read after every other fast field (and after the slow
    # ones): by then the poll has added dozens of rows for the GPU.
    fake.add_rule("nvmlDeviceGetComputeRunningProcesses_v3", device=0, error=code)
    calls = fake.device(0).calls
    reply = poll(b, slow=slow)
    assert fake.device(0).calls - calls > 20  # it was read most of the way
    assert reply["devices"][0]["up"] is False
    v = values(reply)
    assert not [k for k in v if k[1][:2] == ident0]
    # The other GPU keeps every series it had, fast and slow.
    ident1 = ("1", fake.uuid(1))
    assert {k for k in v if k[1][:2] == ident1} == {k for k in full if k[1][:2] == ident1}


def test_lost_gpu_is_down_and_others_unaffected(fake, backend):
    b = started(backend)
    before = values(poll(b))
    fake.device(1).lost = 1
    calls = fake.device(1).calls
    reply = poll(b, slow=False)
    assert reply["devices"][0] == {"uuid": fake.uuid(0), "up": True, "reason": ""}
    assert reply["devices"][1] == {"uuid": fake.uuid(1), "up": False, "reason": "gpu_lost"}
    assert fake.device(1).calls - calls == 1  # a lost GPU costs one call per poll
    v = values(reply)
    assert not [k for k in v if k[1][:2] == ("1", fake.uuid(1))]
    fast_before = {k: x for k, x in before.items() if k[1][0] == "0" and k in v}
    assert fast_before and all(v[k] == x for k, x in fast_before.items())
    fake.device(1).lost = 0
    assert [d["up"] for d in poll(b)["devices"]] == [True, True]


def test_error_code_degrades_one_field_and_is_counted(fake, backend):
    fake.add_rule("nvmlDeviceGetTotalEnergyConsumption", device=1, error=control.UNKNOWN)
    b = started(backend)
    reply = poll(b)
    assert [d["up"] for d in reply["devices"]] == [True, True]
    v = values(reply)
    ident = ("1", fake.uuid(1))
    assert ("accel_energy_joules_total", ident) not in v
    assert ("accel_power_watts", ident) in v
    assert v[("accel_field_errors_total", (*ident, "nvml", "unknown"))] == 1
    v = values(poll(b))
    assert v[("accel_field_errors_total", (*ident, "nvml", "unknown"))] == 2


def test_a_failing_call_is_logged_when_it_starts_and_when_its_reason_changes(fake, backend):
    # The backend's shared contract.Failing: a line per state change, never one a poll.
    fake.add_rule("nvmlDeviceGetTotalEnergyConsumption", device=1, error=control.UNKNOWN)
    b = started(backend)

    def failed_lines(polls: int) -> list[dict[str, Any]]:
        with capture_logs() as logs:
            for _ in range(polls):
                assert [d["up"] for d in poll(b)["devices"]] == [True, True]
        return [
            {k: line[k] for k in ("device", "field", "reason")}
            for line in logs
            if line["event"] == "field read failed"
        ]

    energy = "nvmlDeviceGetTotalEnergyConsumption"
    assert failed_lines(3) == [{"device": "1", "field": energy, "reason": "unknown"}]
    fake.clear_rules()
    fake.add_rule("nvmlDeviceGetTotalEnergyConsumption", device=1, error=nv.TIMEOUT)
    assert failed_lines(2) == [{"device": "1", "field": energy, "reason": "nvml_timeout"}]
    fake.clear_rules()
    fake.add_rule("nvmlDeviceGetTotalEnergyConsumption", device=1, error=control.UNKNOWN)
    fake.add_rule("nvmlDeviceGetTotalEnergyConsumption", device=0, error=control.UNKNOWN)
    assert failed_lines(2) == [
        {"device": "0", "field": energy, "reason": "unknown"},
        {"device": "1", "field": energy, "reason": "unknown"},
    ]


def test_device_answering_nothing_is_down_with_the_error(fake, backend):
    fake.add_rule("*", device=0, error=control.UNKNOWN, after_calls=40)  # bootstrap succeeds
    b = started(backend)
    reply = poll(b)
    reply = poll(b)
    assert reply["devices"][0] == {"uuid": fake.uuid(0), "up": False, "reason": "unknown"}
    assert reply["devices"][1]["up"] is True


def test_reset_required_is_device_fatal(fake, backend):
    b = started(backend)
    fake.add_rule("nvmlDeviceGetUtilizationRates", device=0, error=control.RESET_REQUIRED)
    reply = poll(b)
    assert reply["devices"][0]["reason"] == "reset_required"


def test_gpu_lost_before_bootstrap_stays_in_inventory_as_down(fake, backend):
    fake.device(0).lost = 1
    b = backend()
    _, devices = parse_inventory(b.bootstrap())
    assert [d.uuid for d in devices] == ["unidentified-0", fake.uuid(1)]
    reply = poll(b)
    assert reply["devices"][0] == {"uuid": "unidentified-0", "up": False, "reason": "gpu_lost"}
    assert reply["devices"][1]["up"] is True
    # It comes back: fast polls do not look for it, the next slow poll does and asks
    # for a new worker, whose inventory has the GPU under its real identity.
    fake.device(0).lost = 0
    assert poll(b, slow=False)["devices"][0]["up"] is False
    with pytest.raises(BackendError) as changed:
        poll(b)
    assert changed.value.reason == "inventory_changed"
    _, devices = parse_inventory(backend().bootstrap())
    assert [d.uuid for d in devices] == [fake.uuid(0), fake.uuid(1)]


def test_mig_mode_switched_after_bootstrap_asks_for_a_new_worker(fake, backend):
    b = started(backend)
    poll(b)
    fake.set_mig(1, [MigInstance(1, 0, memory_total=20 << 30, memory_used=1 << 30)])
    poll(b, slow=False)  # fast polls read no mode
    with pytest.raises(BackendError) as changed:
        poll(b)
    assert changed.value.reason == "inventory_changed"
    _, devices = parse_inventory(backend().bootstrap())
    assert dict(devices[1].info)["mig_mode"] == "enabled"


def test_duplicate_uuids_are_made_unique_and_both_gpus_read(fake, backend):
    fake.device(1).uuid = fake.device(0).uuid  # firmware fault or a mock
    b = backend()
    _, devices = parse_inventory(b.bootstrap())  # the daemon's own check of the inventory
    u0 = fake.uuid(0)
    assert [d.uuid for d in devices] == [u0, f"{u0}-1"]
    reply = poll(b)
    assert [d["up"] for d in reply["devices"]] == [True, True]
    v = values(reply)
    assert v[("accel_power_watts", ("0", u0))] == 312.456
    assert v[("accel_power_watts", ("1", f"{u0}-1"))] == 313.456


def test_older_binding_without_some_functions_omits_their_fields_only(fake, backend, monkeypatch):
    # An older nvidia-ml-py: the module lacks these names (pynvml itself is untouched;
    # every value still comes from its real functions and the fake library).
    lacking = {
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlGpmQueryDeviceSupport",
    }
    older = types.ModuleType("pynvml")
    older.__dict__.update({k: v for k, v in vars(pynvml).items() if k not in lacking})
    monkeypatch.setattr(nvml_backend, "_load", lambda: older)
    fake.device(0).clocks_event_reasons = 0x40
    b = started(backend)
    assert sorted(b.nvml.missing) == sorted(lacking)
    reply = poll(b)
    assert [d["up"] for d in reply["devices"]] == [True, True]
    v = values(reply)
    ident = ("0", fake.uuid(0))
    assert v[("accel_temperature_celsius", (*ident, "gpu"))] == 34  # the older call
    assert v[("accel_clock_throttle_active", (*ident, "hw_thermal_slowdown"))] == 1
    assert ("accel_encoder_utilization_ratio", ident) not in v
    assert ("accel_pcie_link_max_width", ident) not in v
    assert v[("accel_pcie_link_max_generation", ident)] == 5
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


def test_init_failures_are_unavailable_or_errors(fake, backend):
    fake.state.init_error = control.DRIVER_NOT_LOADED
    with pytest.raises(BackendUnavailable) as unavailable:
        backend().bootstrap()
    assert unavailable.value.reason == "driver_not_loaded"
    fake.state.init_error = control.LIB_RM_VERSION_MISMATCH
    with pytest.raises(BackendError) as error:
        backend().bootstrap()
    assert error.value.reason == "driver_mismatch"
    assert not isinstance(error.value, BackendUnavailable)
    fake.state.init_error = 0


def test_older_driver_falls_back_to_memory_v1_and_legacy_temperature(fake, backend):
    fake.add_rule("nvmlDeviceGetMemoryInfo_v2", error=13)  # FUNCTION_NOT_FOUND
    fake.add_rule("nvmlDeviceGetTemperatureV", error=13)
    b = started(backend)
    v = values(poll(b))
    ident = ("0", fake.uuid(0))
    assert ("accel_memory_reserved_bytes", ident) not in v
    assert v[("accel_memory_used_bytes", ident)] == (1 << 30) + (512 << 20)  # v1 counts reserved
    assert v[("accel_temperature_celsius", (*ident, "gpu"))] == 34
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


NEWER_REFUSALS = [
    control.NOT_SUPPORTED,
    2,  # INVALID_ARGUMENT
    25,  # ARGUMENT_VERSION_MISMATCH
    control.NO_PERMISSION,
]


@pytest.mark.parametrize("code", NEWER_REFUSALS)
def test_memory_v2_refused_falls_back_to_v1_for_that_gpu(fake, backend, code):
    rule = fake.add_rule("nvmlDeviceGetMemoryInfo_v2", device=0, error=code)
    b = started(backend)
    v = values(poll(b))
    ident = ("0", fake.uuid(0))
    assert v[("accel_memory_total_bytes", ident)] == fake.device(0).memory_total
    assert v[("accel_memory_used_bytes", ident)] == (1 << 30) + (512 << 20)  # v1 counts reserved
    assert ("accel_memory_reserved_bytes", ident) not in v
    assert v[("accel_memory_reserved_bytes", ("1", fake.uuid(1)))] == 512 << 20  # v2 still
    assert not [k for k in v if k[0] == "accel_field_errors_total"]
    # The downgrade is remembered: the refusing entry point is not asked again.
    asked = fake.state.rules[rule].matched
    values(poll(b, slow=False))
    assert fake.state.rules[rule].matched == asked


@pytest.mark.parametrize("code", NEWER_REFUSALS)
def test_temperature_v_refused_falls_back_to_the_legacy_call(fake, backend, code):
    fake.add_rule("nvmlDeviceGetTemperatureV", device=1, error=code)
    b = started(backend)
    v = values(poll(b))
    assert v[("accel_temperature_celsius", ("1", fake.uuid(1), "gpu"))] == 35
    assert v[("accel_temperature_celsius", ("1", fake.uuid(1), "memory"))] == 41
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


@pytest.mark.parametrize("code", NEWER_REFUSALS)
def test_clock_event_reasons_refused_falls_back_to_throttle_reasons(fake, backend, code):
    fake.add_rule("nvmlDeviceGetCurrentClocksEventReasons", device=0, error=code)
    fake.device(0).clocks_event_reasons = 0x20
    b = started(backend)
    v = values(poll(b))
    ident = ("0", fake.uuid(0))
    assert v[("accel_clock_throttle_active", (*ident, "sw_thermal_slowdown"))] == 1
    assert v[("accel_clock_throttle_active", (*ident, "sw_power_cap"))] == 0
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


def test_newer_entry_point_failing_for_real_is_not_retried_with_the_older(fake, backend):
    fake.add_rule("nvmlDeviceGetMemoryInfo_v2", device=0, error=control.UNKNOWN)
    legacy = fake.add_rule("nvmlDeviceGetMemoryInfo", device=0)  # counts calls only
    b = started(backend)
    v = values(poll(b))
    ident = ("0", fake.uuid(0))
    assert ("accel_memory_used_bytes", ident) not in v
    assert v[("accel_field_errors_total", (*ident, "nvml", "unknown"))] == 1
    assert fake.state.rules[legacy].matched == 0
    fake.add_rule("nvmlDeviceGetTemperatureV", device=0, error=control.GPU_IS_LOST)
    assert poll(b)["devices"][0] == {"uuid": fake.uuid(0), "up": False, "reason": "gpu_lost"}


def test_gpu_whose_every_real_call_fails_is_down_even_if_some_fields_are_absent(fake, backend):
    b = started(backend)
    fake.add_rule("nvmlDeviceGetNumFans", device=0, error=control.NOT_SUPPORTED)
    fake.add_rule("*", device=0, error=control.UNKNOWN)
    reply = poll(b)
    assert reply["devices"][0] == {"uuid": fake.uuid(0), "up": False, "reason": "unknown"}
    assert reply["devices"][1]["up"] is True
    assert not [k for k in values(reply) if k[1][:2] == ("0", fake.uuid(0))]


def test_processes_two_call_protocol_and_per_process_series(fake, backend):
    fake.set_processes(
        0,
        [
            Process(4242, used_memory=3 << 30, sm_util=55),
            Process(5151, used_memory=control.NOT_AVAILABLE_U64, sm_util=7),
            Process(6060, used_memory=1 << 20, graphics=True),
        ],
    )
    b = started(backend)
    counted = values(poll(b, processes=False))
    ident = ("0", fake.uuid(0))
    assert counted[("accel_processes", ident)] == 3
    assert not [k for k in counted if k[0] == "accel_process_memory_bytes"]
    v = values(poll(b, processes=True))
    assert v[("accel_process_memory_bytes", (*ident, "4242"))] == 3 * 2**30
    assert ("accel_process_memory_bytes", (*ident, "5151")) not in v  # not available
    assert v[("accel_process_memory_bytes", (*ident, "6060"))] == 2**20
    assert v[("accel_process_sm_utilization_ratio", (*ident, "4242"))] == 0.55
    assert v[("accel_processes", ("1", fake.uuid(1)))] == 0
    # GPU 1 has no process: pynvml's NVMLError(0) for "nothing to report" is no error.
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


def test_mps_clients_are_listed_with_their_own_pids(fake, backend):
    # Under MPS the compute list shows the MPS server; its clients (the pods' processes)
    # only come from the MPS entry point, each with its own memory.
    fake.set_processes(
        0,
        [
            Process(100, used_memory=64 << 20, name="nvidia-cuda-mps-server"),
            Process(4242, used_memory=3 << 30, mps=True),
            Process(5151, used_memory=1 << 30, mps=True),
        ],
    )
    b = started(backend)
    v = values(poll(b, processes=True))
    ident = ("0", fake.uuid(0))
    assert v[("accel_processes", ident)] == 3
    assert v[("accel_process_memory_bytes", (*ident, "4242"))] == 3 * 2**30
    assert v[("accel_process_memory_bytes", (*ident, "5151"))] == 2**30
    assert not [k for k in v if k[0] == "accel_field_errors_total"]
    # A driver without the MPS entry points: the other lists still count, no error.
    for version in ("v3", "v2"):
        fake.add_rule(f"nvmlDeviceGetMPSComputeRunningProcesses_{version}", error=13)
    v = values(poll(started(backend), processes=True))
    assert v[("accel_processes", ident)] == 1
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


@pytest.mark.parametrize("code", [13, *NEWER_REFUSALS])  # 13: FUNCTION_NOT_FOUND
def test_process_lists_fall_back_to_v2_on_drivers_without_v3(fake, backend, code):
    rules = [
        fake.add_rule(f"nvmlDeviceGet{kind}RunningProcesses_v3", error=code)
        for kind in ("Compute", "Graphics")
    ]
    fake.set_processes(
        0,
        [
            Process(4242, used_memory=3 << 30, sm_util=55),
            Process(6060, used_memory=1 << 20, graphics=True),
        ],
    )
    b = started(backend)
    v = values(poll(b, processes=True))
    ident = ("0", fake.uuid(0))
    assert v[("accel_processes", ident)] == 2
    assert v[("accel_process_memory_bytes", (*ident, "4242"))] == 3 * 2**30
    assert v[("accel_process_memory_bytes", (*ident, "6060"))] == 2**20
    assert v[("accel_process_sm_utilization_ratio", (*ident, "4242"))] == 0.55
    assert v[("accel_processes", ("1", fake.uuid(1)))] == 0
    assert not [k for k in v if k[0] == "accel_field_errors_total"]
    # The downgrade is remembered: _v3 is not asked again.
    asked = [fake.state.rules[rule].matched for rule in rules]
    values(poll(b, slow=False, processes=True))
    assert [fake.state.rules[rule].matched for rule in rules] == asked


def test_process_utilization_passes_the_last_sample_time_seen(fake, backend):
    fake.set_processes(0, [Process(4242, sm_util=55)])
    dev = fake.device(0)
    dev.proc_sample_us = 1_000_000
    b = started(backend)
    first = values(poll(b, slow=False, processes=True))
    assert dev.proc_last_seen == 0  # nothing seen yet: every sample the driver has
    assert first[("accel_process_sm_utilization_ratio", ("0", fake.uuid(0), "4242"))] == 0.55
    poll(b, slow=False, processes=True)
    assert dev.proc_last_seen == 1_000_000  # only samples newer than the last one
    dev.proc_sample_us, fake.device(0).procs[0].sm_util = 2_000_000, 60
    third = values(poll(b, slow=False, processes=True))
    assert dev.proc_last_seen == 1_000_000
    assert third[("accel_process_sm_utilization_ratio", ("0", fake.uuid(0), "4242"))] == 0.6


def test_mig_instances_memory_and_gpm_utilization(fake, backend):
    fake.set_mig(
        1,
        [
            MigInstance(
                1,
                0,
                memory_total=20 << 30,
                memory_used=5 << 30,
                util_percent=60,
                dram_percent=25,
                uuid="MIG-11111111-2222-3333-4444-555555555555",
            ),
            MigInstance(2, 0, memory_total=10 << 30, memory_used=1 << 30, util_percent=10),
        ],
    )
    b = backend()
    _, devices = parse_inventory(b.bootstrap())
    assert dict(devices[1].info)["mig_mode"] == "enabled"
    first = values(poll(b))
    ident = ("1", fake.uuid(1))
    assert (
        first[
            (
                "accel_mig_device_info",
                (*ident, "1", "0", "MIG-11111111-2222-3333-4444-555555555555", "1g.slice"),
            )
        ]
        == 1
    )
    assert first[("accel_mig_memory_used_bytes", (*ident, "1"))] == 5 * 2**30
    assert first[("accel_mig_memory_total_bytes", (*ident, "2"))] == 10 * 2**30
    assert ("accel_mig_utilization_ratio", (*ident, "1")) not in first  # needs two samples
    second = values(poll(b, slow=False))
    assert second[("accel_mig_utilization_ratio", (*ident, "1"))] == 0.6
    assert second[("accel_mig_memory_bandwidth_utilization_ratio", (*ident, "1"))] == 0.25
    assert second[("accel_mig_utilization_ratio", (*ident, "2"))] == 0.1
    # An instance destroyed: gone at the next slow poll.
    fake.device(1).mig[1].present = 0
    third = values(poll(b))
    assert not [k for k in third if k[0].startswith("accel_mig") and k[1][2] == "2"]


def test_mig_memory_is_per_gpu_instance_not_per_compute_instance(fake, backend):
    shared = {"memory_total": 40 << 30, "memory_used": 7 << 30}
    fake.set_mig(
        0,
        [
            MigInstance(3, 0, **shared, uuid="MIG-aaaaaaaa-0000-0000-0000-000000000030"),
            MigInstance(3, 1, **shared, uuid="MIG-aaaaaaaa-0000-0000-0000-000000000031"),
            MigInstance(5, 0, memory_total=20 << 30, memory_used=1 << 30),
        ],
    )
    b = started(backend)
    v = values(poll(b))
    ident = ("0", fake.uuid(0))
    info = sorted(k[1][2:4] for k in v if k[0] == "accel_mig_device_info")
    assert info == [("3", "0"), ("3", "1"), ("5", "0")]
    used = {k[1][2:]: x for k, x in v.items() if k[0] == "accel_mig_memory_used_bytes"}
    assert used == {("3",): 7 * 2**30, ("5",): 2**30}
    assert v[("accel_mig_memory_free_bytes", (*ident, "3"))] == 33 * 2**30
    # Summing over instances gives the memory in use once, not once per compute instance.
    assert sum(used.values()) == 8 * 2**30


@pytest.mark.parametrize("failing", ["nvmlGpmMetricsGet", "nvmlGpmMigSampleGet"])
def test_gpm_samples_are_freed_when_the_gpu_is_lost_mid_read(fake, backend, failing):
    fake.set_mig(1, [MigInstance(1, 0, memory_total=20 << 30, memory_used=1 << 30)])
    fake.device(0).gpm_supported = 0  # only the MIG instance's samples are counted here
    before = fake.state.gpm_samples_live
    b = started(backend)
    poll(b)
    assert fake.state.gpm_samples_live - before == 1  # held for the next poll
    fake.add_rule(failing, error=control.GPU_IS_LOST)
    assert poll(b, slow=False)["devices"][1]["reason"] == "gpu_lost"
    # At most the sample kept for the next poll is alive; none leaked.
    assert fake.state.gpm_samples_live - before == len(b.gpus[1].gpm_samples) <= 1
    b.close()
    assert fake.state.gpm_samples_live == before


@pytest.mark.serial  # times polls against the event wait: no parallel neighbours
def test_xid_events_are_counted_without_delaying_polls(fake, backend):
    b = started(backend, events=True)
    assert b.events is not None and b.events.registered == 2
    fake.inject_xid(1, 79)
    fake.inject_xid(1, 79)
    fake.inject_xid(0, 48)
    fake.inject_event(0, control.EVENT_DOUBLE_BIT_ECC)

    def xid_count() -> float | None:
        return values(poll(b, slow=False)).get(
            ("accel_xid_errors_total", ("1", fake.uuid(1), "79"))
        )

    eventually(lambda: xid_count() == 2, what="both XIDs on GPU 1")
    v = values(poll(b, slow=False))
    assert v[("accel_xid_errors_total", ("1", fake.uuid(1), "79"))] == 2
    assert v[("accel_xid_errors_total", ("0", fake.uuid(0), "48"))] == 1
    assert v[("accel_device_events_total", ("0", fake.uuid(0), "double_bit_ecc"))] == 1
    stamp = v[("accel_xid_last_timestamp_seconds", ("1", fake.uuid(1), "79"))]
    assert abs(stamp - time.time()) < 600
    # The event thread sits in nvmlEventSetWait (500 ms) all the time; polls do not wait for it.
    began = time.monotonic()
    for _ in range(10):
        poll(b, slow=False)
    per_poll = (time.monotonic() - began) / 10
    assert per_poll / (b.events.wait_ms / 1000) < 0.5
    # A GPU found lost keeps its XID counters: they are what explains it.
    fake.device(1).lost = 1
    reply = poll(b, slow=False)
    assert reply["devices"][1]["up"] is False
    lost = values(reply)
    assert lost[("accel_xid_errors_total", ("1", fake.uuid(1), "79"))] == 2
    assert ("accel_power_watts", ("1", fake.uuid(1))) not in lost


def test_event_wait_returning_at_once_does_not_spin(fake, backend):
    rule = fake.add_rule("nvmlEventSetWait_v2", device=-2, error=10)  # TIMEOUT, no wait
    b = started(backend, events=True)
    assert b.events is not None
    waits, cpu, wall = fake.state.rules[rule].matched, time.process_time(), time.monotonic()
    time.sleep(1.5)
    waits = fake.state.rules[rule].matched - waits
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    # One wait per wait_ms of wall time at most, and the thread idles meanwhile.
    assert waits <= wall / (b.events.wait_ms / 1000) + 2
    assert cpu / wall < 0.5


def test_xids_are_registered_even_if_supported_event_types_fails(fake, backend):
    fake.add_rule("nvmlDeviceGetSupportedEventTypes", device=1, error=control.NOT_SUPPORTED)
    b = started(backend, events=True)
    assert b.events is not None and b.events.registered == 2
    fake.inject_xid(1, 31)
    fake.inject_event(1, control.EVENT_DOUBLE_BIT_ECC)  # not registered on GPU 1: unknown
    key = ("accel_xid_errors_total", ("1", fake.uuid(1), "31"))
    eventually(lambda: key in values(poll(b, slow=False)), what="the XID on GPU 1")
    v = values(poll(b, slow=False))
    assert v[key] == 1
    assert not [k for k in v if k[0] == "accel_device_events_total"]


def test_close_stops_the_event_thread(fake, backend):
    b = started(backend, events=True)
    assert any(t.name == "nvml-events" for t in threading.enumerate())
    b.close()
    assert not any(t.name == "nvml-events" and t.is_alive() for t in threading.enumerate())


def test_unknown_operation_is_an_error(fake, backend):
    b = started(backend)
    with pytest.raises(BackendError):
        b.handle("reset", {})


# -- GPM on whole GPUs -----------------------------------------------------------

# metric id -> (family, label) of every GPM figure the backend exports.
GPM_FAMILIES = {
    1: ("accel_graphics_engine_active_ratio", ()),
    2: ("accel_sm_active_ratio", ()),
    3: ("accel_sm_occupancy_ratio", ()),
    4: ("accel_pipe_active_ratio", ("integer",)),
    5: ("accel_pipe_active_ratio", ("tensor",)),
    6: ("accel_pipe_active_ratio", ("tensor_dfma",)),
    7: ("accel_pipe_active_ratio", ("tensor_hmma",)),
    8: ("accel_pipe_active_ratio", ("tensor_dmma",)),
    9: ("accel_pipe_active_ratio", ("tensor_imma",)),
    10: ("accel_dram_active_ratio", ()),
    11: ("accel_pipe_active_ratio", ("fp64",)),
    12: ("accel_pipe_active_ratio", ("fp32",)),
    13: ("accel_pipe_active_ratio", ("fp16",)),
    20: ("accel_pcie_tx_average_bytes_per_second", ()),
    21: ("accel_pcie_rx_average_bytes_per_second", ()),
    **{30 + k: ("accel_engine_utilization_ratio", (f"nvdec{k}",)) for k in range(8)},
    **{40 + k: ("accel_engine_utilization_ratio", (f"nvjpg{k}",)) for k in range(8)},
    50: ("accel_engine_utilization_ratio", ("ofa0",)),
    51: ("accel_engine_utilization_ratio", ("ofa1",)),
    60: ("accel_nvlink_rx_average_bytes_per_second", ()),
    61: ("accel_nvlink_tx_average_bytes_per_second", ()),
    **{166 + k: ("accel_engine_utilization_ratio", (f"nvenc{k}",)) for k in range(4)},
}
GPM_NAMES = {family for family, _ in GPM_FAMILIES.values()}


def gpm_series(v: dict[tuple[str, tuple[str, ...]], float], index: int) -> dict[Any, float]:
    return {
        (k[0], k[1][2:]): x for k, x in v.items() if k[0] in GPM_NAMES and k[1][0] == str(index)
    }


def test_gpm_figures_of_whole_gpus_from_consecutive_samples(fake, backend):
    for i in range(2):
        fake.set_gpm(i, {m: 10.0 * i + m % 90 + 0.25 for m in GPM_FAMILIES})
    b = started(backend)
    first = values(poll(b))
    assert not gpm_series(first, 0)  # one sample: nothing to average yet
    gets = fake.state.gpm_sample_gets
    second = values(poll(b, slow=False))
    for i in range(2):
        want = {}
        for m, (family, label) in GPM_FAMILIES.items():
            raw = 10.0 * i + m % 90 + 0.25
            want[(family, label)] = raw * 2**20 if family.endswith("_second") else raw / 100
        assert gpm_series(second, i) == want
    # The previous poll's sample was the first of this one: one sample a GPU a poll.
    assert fake.state.gpm_sample_gets - gets == 2
    # A value changed shows at the next poll, computed from the new sample.
    fake.set_gpm(1, {2: 77.0})
    third = values(poll(b, slow=False))
    assert third[("accel_sm_active_ratio", ("1", fake.uuid(1)))] == 0.77
    assert not [k for k in third if k[0] == "accel_field_errors_total"]


def test_gpm_metric_not_supported_on_one_gpu_is_absent_there_and_not_asked_again(fake, backend):
    fake.set_gpm(1, status={3: control.NOT_SUPPORTED, 13: control.NOT_SUPPORTED})
    b = started(backend)
    poll(b)
    v = values(poll(b, slow=False))
    assert ("accel_sm_occupancy_ratio", ()) not in gpm_series(v, 1)
    assert ("accel_pipe_active_ratio", ("fp16",)) not in gpm_series(v, 1)
    assert ("accel_sm_occupancy_ratio", ()) in gpm_series(v, 0)
    assert ("accel_pipe_active_ratio", ("fp16",)) in gpm_series(v, 0)
    assert not [k for k in v if k[0] == "accel_field_errors_total"]
    # Dropped from GPU 1's request once; GPU 0 still asks for them.
    assert 3 not in b.gpus[1].gpm_full.ids and 13 not in b.gpus[1].gpm_full.ids
    assert 3 in b.gpus[0].gpm_full.ids
    fake.set_gpm(1, status={3: 0})  # not asked any more: stays absent
    assert ("accel_sm_occupancy_ratio", ()) not in gpm_series(values(poll(b, slow=False)), 1)


def test_pre_hopper_gpu_has_no_gpm_series_and_no_errors(fake, backend):
    fake.device(0).gpm_supported = 0
    b = started(backend)
    for _ in range(3):
        v = values(poll(b))
    assert not gpm_series(v, 0)
    assert gpm_series(v, 1)
    assert not [k for k in v if k[0] == "accel_field_errors_total"]
    assert poll(b, slow=False)["devices"][0]["up"] is True


@pytest.mark.parametrize("bad", [100.5, -1.0, float("nan"), float("inf")])
def test_gpm_value_out_of_range_is_omitted_and_counted(fake, backend, bad):
    fake.set_gpm(0, {2: bad, 20: -5.0})
    b = started(backend)
    poll(b)
    v = values(poll(b, slow=False))
    ident = ("0", fake.uuid(0))
    assert ("accel_sm_active_ratio", ident) not in v
    assert ("accel_pcie_tx_average_bytes_per_second", ident) not in v
    assert ("accel_sm_occupancy_ratio", ident) in v
    assert v[("accel_field_errors_total", (*ident, "nvml", "invalid_value"))] == 2
    assert ("accel_sm_active_ratio", ("1", fake.uuid(1))) in v


def test_gpm_call_failing_on_one_gpu_gives_no_stale_numbers(fake, backend):
    b = started(backend)
    poll(b)
    assert gpm_series(values(poll(b, slow=False)), 0)
    rule = fake.add_rule("nvmlGpmSampleGet", device=0, error=control.UNKNOWN)
    v = values(poll(b, slow=False))
    assert not gpm_series(v, 0) and gpm_series(v, 1)
    assert v[("accel_field_errors_total", ("0", fake.uuid(0), "nvml", "unknown"))] == 1
    fake.clear_rule(rule)
    # The pair was broken: the next sample primes again instead of spanning the gap.
    assert not gpm_series(values(poll(b, slow=False)), 0)
    assert gpm_series(values(poll(b, slow=False)), 0)


def test_no_gpm_sample_leaks_over_a_thousand_polls_and_close(fake, backend):
    before = int(fake.state.gpm_samples_live)
    gets, metric_gets = int(fake.state.gpm_sample_gets), int(fake.state.gpm_metrics_gets)
    b = started(backend)
    for _ in range(1000):
        poll(b, slow=False)
    # Two buffers a GPU, reused: the count never grows with the polls.
    assert fake.state.gpm_samples_live - before == 4
    # At most one sample and one metrics call a GPU a poll.
    assert fake.state.gpm_sample_gets - gets == 2000
    assert fake.state.gpm_metrics_gets - metric_gets == 2 * 999
    b.close()
    assert fake.state.gpm_samples_live == before


@pytest.mark.parametrize(
    "failing",
    ["nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlDeviceGetComputeRunningProcesses_v3"],
)
def test_gpm_buffers_are_freed_when_a_gpu_is_lost_mid_poll(fake, backend, failing):
    before = int(fake.state.gpm_samples_live)
    b = started(backend)
    poll(b)
    poll(b, slow=False)
    assert fake.state.gpm_samples_live - before == 4
    # nvmlGpmMetricsGet names no device: the rule fails it for both GPUs.
    fake.add_rule(failing, device=-1 if failing == "nvmlGpmMetricsGet" else 0, error=15)
    reply = poll(b, slow=False)
    assert reply["devices"][0]["reason"] == "gpu_lost"
    lost = 2 if failing == "nvmlGpmMetricsGet" else 1
    assert [d["up"] for d in reply["devices"]] == [False, lost == 1]
    assert fake.state.gpm_samples_live - before == 4 - 2 * lost
    # A GPU that answers again primes a new pair, then has its figures back.
    fake.clear_rules()
    poll(b, slow=False)
    assert gpm_series(values(poll(b, slow=False)), 0)
    assert fake.state.gpm_samples_live - before == 4
    b.close()
    assert fake.state.gpm_samples_live == before


# -- reliability fields ------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "name"),
    [(0, "none"), (1, "gpu_reset"), (2, "node_reboot"), (3, "drain_p2p"), (4, "drain_and_reset")],
)
def test_recovery_action_is_one_hot(fake, backend, action, name):
    fake.device(1).recovery_action = action
    v = values(poll(started(backend)))
    ident = ("1", fake.uuid(1))
    actions = {
        k[1][2]: x
        for k, x in v.items()
        if k[0] == "accel_device_recovery_action" and k[1][:2] == ident
    }
    assert actions == {
        a: (1.0 if a == name else 0.0)
        for a in ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset")
    }


def test_recovery_action_field_failing_is_absent_and_counted(fake, backend):
    fake.add_rule("field:230", device=0, error=control.UNKNOWN)
    v = values(poll(started(backend)))
    assert not [k for k in v if k[0] == "accel_device_recovery_action" and k[1][0] == "0"]
    assert v[("accel_field_errors_total", ("0", fake.uuid(0), "nvml", "unknown"))] == 1
    assert [k for k in v if k[0] == "accel_device_recovery_action" and k[1][0] == "1"]


def test_nvlink_errors_fabric_margin_and_power_bounds(fake, backend):
    dev = fake.device(0)
    dev.nvlink_active_mask = 0b11
    dev.nvlink_errors[1][control.NVLINK_CRC_FLIT] = 7
    dev.nvlink_errors[1][control.NVLINK_REPLAY] = 3
    dev.nvlink_errors[0][control.NVLINK_RECOVERY] = 1
    dev.fabric_state = 3
    # degraded bandwidth TRUE, route recovery FALSE, others not supported, config "none"
    dev.fabric_health_mask = 0b01 | (0b10 << 2) | (1 << 8)
    dev.margin_temperature = -1  # past the limit: a real temperature, not "not available"
    dev.power_min_mw, dev.power_max_mw, dev.power_default_mw = 100000, 650000, 600000
    v = values(poll(started(backend)))
    ident = ("0", fake.uuid(0))
    errors = {
        k[1][2:]: x
        for k, x in v.items()
        if k[0] == "accel_nvlink_errors_total" and k[1][:2] == ident
    }
    assert errors[("1", "crc_flit")] == 7
    assert errors[("1", "replay")] == 3
    assert errors[("0", "recovery")] == 1
    assert errors[("0", "crc_data")] == 0
    assert {link for link, _ in errors} == {"0", "1"}  # active links only
    assert v[("accel_nvidia_fabric_state", (*ident, "completed"))] == 1
    assert v[("accel_nvidia_fabric_state", (*ident, "in_progress"))] == 0
    health = {
        k[1][2]: x
        for k, x in v.items()
        if k[0] == "accel_nvidia_fabric_health_issue" and k[1][:2] == ident
    }
    assert health == {"degraded_bandwidth": 1, "route_recovery": 0, "incorrect_configuration": 0}
    assert v[("accel_temperature_margin_celsius", ident)] == -1
    assert v[("accel_power_limit_bound_watts", (*ident, "min"))] == 100.0
    assert v[("accel_power_limit_bound_watts", (*ident, "max"))] == 650.0
    assert v[("accel_power_limit_bound_watts", (*ident, "default"))] == 600.0
    # GPU 1 is on no fabric (NOT_SUPPORTED): no fabric series, no error.
    assert not [k for k in v if k[0].startswith("accel_nvidia_fabric") and k[1][0] == "1"]
    assert not [k for k in v if k[0] == "accel_field_errors_total"]


def test_per_process_encoder_decoder_memory_and_name(fake, backend):
    fake.set_processes(
        0, [Process(4242, sm_util=50, mem_util=20, enc_util=7, dec_util=9, name="python3")]
    )
    fake.device(0).proc_sample_us = 1_000_000
    v = values(poll(started(backend), processes=True))
    key = ("0", fake.uuid(0), "4242")
    assert v[("accel_process_memory_utilization_ratio", key)] == 0.2
    assert v[("accel_process_encoder_utilization_ratio", key)] == 0.07
    assert v[("accel_process_decoder_utilization_ratio", key)] == 0.09
    assert v[("accel_process_info", (*key, "python3"))] == 1


def test_sram_ecc_threshold(fake, backend):
    fake.device(0).sram_threshold_exceeded = 1
    fake.device(1).sram_threshold_exceeded = 2  # NOT_SUPPORTED there
    v = values(poll(started(backend)))
    assert v[("accel_sram_ecc_threshold_exceeded", ("0", fake.uuid(0)))] == 1
    assert ("accel_sram_ecc_threshold_exceeded", ("1", fake.uuid(1))) not in v
    assert not [k for k in v if k[0] == "accel_field_errors_total"]
