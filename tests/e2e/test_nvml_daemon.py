"""The real daemon (subprocess) with the real pynvml in its worker, against the fake
libnvidia-ml.so.1 found through LD_LIBRARY_PATH, as on a GPU node."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakes.nvml.control import NOT_SUPPORTED, MigInstance, Process
from tests.helpers.cli import WITHOUT_RICH
from tests.helpers.daemon import REPO, samples, value
from tests.helpers.promtool import check_metrics

# The other sources that start on their own (enabled: auto), off so that only the
# nvml worker and its series are present.
OTHERS_OFF = {
    name: {"enabled": False}
    for name in ("host", "amdsmi", "levelzero", "hlml", "tpu", "neuron", "ccl_ras", "ccl_inspector")
}

OTHERS_OFF_FLAGS = [
    arg for name in OTHERS_OFF for arg in (f"--sources.{name.replace('_', '-')}.enabled", "false")
]


def nvml_config(**nvml):
    # The full profile: these tests check every row the fake serves, per link and engine.
    return {
        "sources": {**OTHERS_OFF, "nvml": {"interval": "1s", "slow_interval": "1s", **nvml}},
        "outputs": {"prometheus": {"profile": "full"}},
    }


def test_exact_values_on_metrics_and_promtool(daemon_factory, fake_nvml):
    fake = fake_nvml(2)
    dev = fake.device(1)
    # Values whose conversion by multiplying (x 1e-3, x 1e-9) is off in the last digit.
    dev.power_mw, dev.power_limit_mw, dev.energy_mj, dev.util_gpu = 250123, 700123, 5_000_001, 99
    dev.memory_used, dev.pcie_rx_kbs, dev.temperature_gpu = 7 << 30, 1000, 71
    dev.violation_ns[8] = 123_456_789
    d = daemon_factory(nvml_config(), env=fake.env())
    u0, u1 = fake.uuid(0), fake.uuid(1)
    d.wait_metric("accel_device_up", 1, device="1", uuid=u1)
    text = d.metrics()
    s = samples(text)
    assert value(s, "accel_devices", vendor="nvidia") == 2
    assert value(s, "accel_exporter_source_up", source="nvml") == 1
    info = dict(
        vendor="nvidia",
        device="1",
        uuid=u1,
        model="NVIDIA H100 80GB HBM3",
        pci_bus_id="00000000:24:00.0",
        serial="1654922001001",
        vbios="96.00.99.00.02",
        driver_version="580.82.07",
        cuda_driver_version="12.8",
        mig_mode="disabled",
        compute_partition="",
        memory_partition="",
        partition="",
        physical_gpu="",
    )
    assert value(s, "accel_device_info", **info) == 1
    one = {"device": "1", "uuid": u1}
    assert value(s, "accel_power_watts", **one) == 250.123
    assert value(s, "accel_power_limit_watts", **one) == 700.123
    assert value(s, "accel_energy_joules_total", **one) == 5000.001
    assert value(s, "accel_utilization_ratio", **one) == 0.99
    assert value(s, "accel_memory_used_bytes", **one) == 7 * 2**30
    assert value(s, "accel_pcie_rx_bytes_per_second", **one) == 1000 * 1024
    assert value(s, "accel_temperature_celsius", sensor="gpu", **one) == 71
    assert value(s, "accel_clock_hertz", clock="graphics", **one) == 1.755e9
    assert (
        value(s, "accel_clock_violation_seconds_total", reason="hw_power_brake_slowdown", **one)
        == 0.123456789
    )
    assert value(s, "accel_ecc_errors_total", type="corrected", counter="aggregate", **one) == 17
    assert value(s, "accel_power_watts", device="0", uuid=u0) == 312.456
    # Only identity labels plus one dimension on device series; the rest is in the info metric.
    for (name, labels), _ in s.items():
        if name.startswith("accel_") and not name.startswith(
            ("accel_exporter", "accel_device_info", "accel_mig_", "accel_ccl_")
        ):
            keys = {k for k, _ in labels}
            # Error counters split by two bounded dimensions (ECC type and counter, NVLink
            # link and error type), as the issues that added them ask.
            two = name in ("accel_ecc_errors_total", "accel_nvlink_errors_total")
            assert len(keys - {"device", "uuid"}) <= (2 if two else 1), name
    check_metrics(text)
    # ECC growth shows at the next slow poll.
    dev.ecc[1][0] += 2
    d.wait_metric("accel_ecc_errors_total", 2, type="uncorrected", counter="volatile", **one)


def test_not_supported_and_all_ones_are_omitted_on_metrics(daemon_factory, fake_nvml):
    fake = fake_nvml(2)
    fake.add_rule("nvmlDeviceGetPowerUsage", device=0, error=NOT_SUPPORTED)
    dev = fake.device(0)
    dev.clock_mhz[2] = 0xFFFFFFFF  # uint "not available"
    dev.util_decoder = 0xFFFFFFFF
    dev.energy_mj = 0xFFFFFFFFFFFFFFFF  # unsigned long long "not available"
    dev.violation_ns[6] = 0xFFFFFFFFFFFFFFFF  # a field value
    d = daemon_factory(nvml_config(), env=fake.env())
    u0, u1 = fake.uuid(0), fake.uuid(1)
    d.wait_metric(
        "accel_ecc_errors_total", 17, type="corrected", counter="aggregate", device="0", uuid=u0
    )
    text = d.metrics()
    s = samples(text)
    zero = {"device": "0", "uuid": u0}
    assert value(s, "accel_device_up", **zero) == 1
    assert value(s, "accel_power_watts", **zero) is None
    assert value(s, "accel_clock_hertz", clock="memory", **zero) is None
    assert value(s, "accel_decoder_utilization_ratio", **zero) is None
    assert value(s, "accel_energy_joules_total", **zero) is None
    assert (
        value(s, "accel_clock_violation_seconds_total", reason="sw_thermal_slowdown", **zero)
        is None
    )
    # What is still there is still there, and the other GPU is complete.
    assert value(s, "accel_clock_hertz", clock="sm", **zero) == 1.755e9
    assert value(s, "accel_clock_violation_seconds_total", reason="sw_power_cap", **zero) == 1.5
    assert value(s, "accel_power_watts", device="1", uuid=u1) == 313.456
    assert value(s, "accel_clock_hertz", clock="memory", device="1", uuid=u1) == 2.619e9
    # Not supported is a fact about the GPU, not an error.
    assert "accel_field_errors_total" not in text
    # No sentinel anywhere, whatever the scale it was multiplied by.
    for (name, labels), number in s.items():
        digits = repr(number).replace(".", "")
        assert "4294967295" not in digits and "184467440737095" not in digits, (name, labels)
    check_metrics(text)


def test_lost_gpu_is_down_others_unaffected(daemon_factory, fake_nvml):
    fake = fake_nvml(3)
    d = daemon_factory(nvml_config(), env=fake.env())
    u = [fake.uuid(i) for i in range(3)]
    d.wait_metric("accel_device_up", 1, device="2", uuid=u[2])
    fake.device(1).lost = 1
    d.wait_metric("accel_device_up", 0, device="1", uuid=u[1])
    s = samples(d.metrics())
    assert value(s, "accel_device_down_reason_info", device="1", uuid=u[1], reason="gpu_lost") == 1
    assert value(s, "accel_power_watts", device="1", uuid=u[1]) is None
    for i in (0, 2):
        assert value(s, "accel_device_up", device=str(i), uuid=u[i]) == 1
        assert value(s, "accel_power_watts", device=str(i), uuid=u[i]) is not None
    assert value(s, "accel_exporter_source_up", source="nvml") == 1
    fake.device(1).lost = 0
    d.wait_metric("accel_device_up", 1, device="1", uuid=u[1])


def test_gpu_lost_at_worker_start_comes_back_with_its_identity(daemon_factory, fake_nvml):
    fake = fake_nvml(2)
    fake.device(0).lost = 1  # not even its UUID can be read when the worker starts
    d = daemon_factory(nvml_config(), env=fake.env())
    d.wait_metric("accel_device_up", 0, device="0", uuid="unidentified-0")
    assert value(d.metrics(), "accel_device_up", device="1", uuid=fake.uuid(1)) == 1
    fake.device(0).lost = 0
    d.wait_metric("accel_device_up", 1, device="0", uuid=fake.uuid(0))
    text = d.metrics()
    assert "unidentified-0" not in text
    assert value(text, "accel_power_watts", device="0", uuid=fake.uuid(0)) == 312.456
    assert value(text, "accel_exporter_source_up", source="nvml") == 1
    status = d.status()["sources"]["nvml"]
    assert status["worker_restarts"] == 1 and status["worker_last_error"] == ""
    assert len(d.workers()) == 1


def test_sixteen_gpu_node(daemon_factory, fake_nvml):
    fake = fake_nvml(16)
    d = daemon_factory(nvml_config(), env=fake.env())
    d.wait_metric("accel_device_up", 1, device="15", uuid=fake.uuid(15))
    text = d.metrics()
    s = samples(text)
    assert value(s, "accel_devices", vendor="nvidia") == 16
    for i in range(16):
        ident = {"device": str(i), "uuid": fake.uuid(i)}
        assert value(s, "accel_device_up", **ident) == 1
        assert value(s, "accel_power_watts", **ident) == (312456 + 1000 * i) / 1000
        assert value(s, "accel_nvlink_up", link="17", **ident) == 1
    assert len({dict(k[1])["pci_bus_id"] for k in s if k[0] == "accel_device_info"}) == 16
    check_metrics(text)


def test_xid_processes_and_mig_through_the_daemon(daemon_factory, fake_nvml):
    fake = fake_nvml(2)
    fake.set_processes(0, [Process(3131, used_memory=2 << 30, sm_util=80)])
    fake.set_mig(
        1, [MigInstance(3, 1, memory_total=40 << 30, memory_used=9 << 30, util_percent=45)]
    )
    d = daemon_factory(nvml_config(processes=True), env=fake.env())
    u0, u1 = fake.uuid(0), fake.uuid(1)
    d.wait_metric("accel_device_up", 1, device="0", uuid=u0)
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
    fake.inject_xid(0, 79)
    d.wait_metric("accel_xid_errors_total", 1, device="0", uuid=u0, xid="79")
    s = samples(d.metrics())
    assert value(s, "accel_xid_last_timestamp_seconds", device="0", uuid=u0, xid="79") > 0
    assert value(s, "accel_process_memory_bytes", device="0", uuid=u0, pid="3131") == 2 * 2**30
    assert (
        value(
            s,
            "accel_mig_memory_used_bytes",
            device="1",
            uuid=u1,
            gpu_instance="3",
        )
        == 9 * 2**30
    )
    d.wait_metric("accel_mig_utilization_ratio", 0.45, device="1", uuid=u1, gpu_instance="3")
    check_metrics(d.metrics())


def test_no_library_is_unavailable_with_reason(daemon_factory, tmp_path):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    d = daemon_factory(
        {"sources": {"nvml": {"interval": "1s"}}}, env={"LD_LIBRARY_PATH": str(empty)}
    )
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    entry = d.wait_for(
        lambda: (
            d.status()["sources"]["nvml"]["state"] == "unavailable"
            and d.status()["sources"]["nvml"]
        ),
        what="nvml unavailable",
    )
    assert "libnvidia-ml.so.1" in entry["last_error"]
    text = d.metrics()
    assert "accel_exporter_source_unavailable_info{" in text
    assert value(text, "accel_exporter_source_up", source="nvml") is None
    assert "accel_device_up" not in text


def test_expected_count_next_to_the_count_found(daemon_factory, fake_nvml):
    # A node that booted with 7 of its 8 GPUs: both numbers are on /metrics for the alert.
    fake = fake_nvml(7)
    d = daemon_factory(nvml_config(expected_devices=8), env=fake.env())
    d.wait_metric("accel_device_up", 1, device="6", uuid=fake.uuid(6))
    s = samples(d.metrics())
    assert value(s, "accel_devices", vendor="nvidia") == 7
    assert value(s, "accel_devices_expected", vendor="nvidia") == 8
    check_metrics(d.metrics())


def test_no_library_with_an_expected_count_is_a_failure(daemon_factory, tmp_path):
    # The node is declared to have GPUs: a missing driver is a fault, and the expected
    # count stays on /metrics so that the GPU-missing alert fires for this node.
    empty = tmp_path / "no-driver"
    empty.mkdir()
    d = daemon_factory(
        {"sources": {"nvml": {"interval": "1s", "expected_devices": 8}}},
        env={"LD_LIBRARY_PATH": str(empty)},
    )
    d.wait_metric("accel_exporter_source_up", 0, source="nvml")
    s = samples(d.metrics())
    assert value(s, "accel_devices_expected", vendor="nvidia") == 8
    assert value(s, "accel_devices", vendor="nvidia") is None
    assert not [
        k
        for k in s
        if k[0] == "accel_exporter_source_unavailable_info" and dict(k[1])["source"] == "nvml"
    ]
    reasons = [dict(k[1])["reason"] for k in s if k[0] == "accel_exporter_source_down_reason_info"]
    assert reasons == ["library_not_found"]
    assert "libnvidia-ml.so.1" in d.status()["sources"]["nvml"]["last_error"]


def run_cli(args, env):
    full_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{WITHOUT_RICH}", **env}
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
        cwd=str(REPO),
    )


def test_once_and_probe_with_and_without_library(fake_nvml, tmp_path):
    fake = fake_nvml(2)
    flags = OTHERS_OFF_FLAGS
    once = run_cli(["once", "--format", "json", *flags], fake.env())
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)
    assert doc["nvml"]["ok"] is True and doc["nvml"]["unavailable"] is False
    power = [r for r in doc["nvml"]["readings"] if r["metric"] == "accel_power_watts"]
    assert sorted(r["value"] for r in power) == [312.456, 313.456]
    probe = run_cli(["probe", *flags], fake.env())
    assert probe.returncode == 0, probe.stderr
    line = next(ln for ln in probe.stdout.splitlines() if ln.startswith("nvml"))
    assert line.split()[1:3] == ["auto", "ok"]

    empty = tmp_path / "empty"
    empty.mkdir()
    without = {"LD_LIBRARY_PATH": str(empty)}
    once = run_cli(["once", *flags], without)
    assert once.returncode == 0, once.stderr
    assert "nvml: unavailable: libnvidia-ml.so.1 could not be loaded" in once.stderr
    probe = run_cli(["probe", *flags], without)
    line = next(ln for ln in probe.stdout.splitlines() if ln.startswith("nvml"))
    assert line.split()[1:3] == ["auto", "unavailable"]
    assert "libnvidia-ml.so.1" in line
    # A driver that is installed but not loaded is reported as such.
    fake.state.init_error = 9
    probe = run_cli(["probe", *flags], fake.env())
    line = next(ln for ln in probe.stdout.splitlines() if ln.startswith("nvml"))
    assert line.split()[1:3] == ["auto", "unavailable"] and "driver is not loaded" in line


def test_probe_without_the_binding(fake_nvml, tmp_path):
    # A pynvml that cannot be imported, found first on the path: as if nvidia-ml-py
    # were not installed, while the library itself is there.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text("raise ImportError('No module named pynvml')\n")
    env = {**fake_nvml(1).env(), "PYTHONPATH": f"{shadow}:{REPO}"}
    probe = run_cli(["probe", *OTHERS_OFF_FLAGS], env)
    line = next(ln for ln in probe.stdout.splitlines() if ln.startswith("nvml"))
    assert line.split()[1:3] == ["auto", "unavailable"]
    assert "nvidia-ml-py is not installed" in line
