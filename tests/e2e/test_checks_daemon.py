"""The health checks against the real daemon serving the fake NVIDIA library.

One daemon; the fake GPUs are driven from healthy to broken while each check is
asked, through the CLI, what it makes of them.
"""

from __future__ import annotations

import subprocess

import pytest
import structlog

from exporter.cli import main
from tests.helpers.cli import run_cli
from tests.helpers.daemon import value
from tests.helpers.workload import QUIET


@pytest.fixture(autouse=True)
def _restore_logging():
    yield
    structlog.reset_defaults()


def check(capsys, d, *args: str) -> tuple[int, str]:
    status = main(["check", *args, "--url", d.url, "--timeout", "10"])
    return status, capsys.readouterr().out.strip()


def nvml_daemon(daemon_factory, fake):
    """A daemon reading the fake GPUs fast (slow fields too), other sources quiet."""
    return daemon_factory(
        {
            "sources": {
                **QUIET,
                "nvml": {"enabled": True, "interval": "300ms", "slow_interval": "600ms"},
            }
        },
        env=fake.env(),
    )


def test_checks_follow_the_gpus(daemon_factory, fake_nvml, capsys):
    fake = fake_nvml(2)
    d = nvml_daemon(daemon_factory, fake)
    g0, g1 = fake.uuid(0), fake.uuid(1)
    d.wait_metric("accel_device_up", 1, device="1", uuid=g1, timeout=40)
    d.wait_metric("accel_remapped_rows_pending", 0, device="1", uuid=g1)
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the XID event set")

    healthy = {
        ("gpu-count", "--expected", "2"): "2 of 2 expected GPUs present, 2 up",
        ("temperature", "--warn", "80", "--crit", "90"): "hottest gpu sensor 35C",
        ("ecc",): "no uncorrectable errors",
        ("row-remap",): "no pending or failed remappings",
        ("retired-pages",): "no pages near the retirement limit",
        ("xid", "--window", "10m"): "0 XID codes",
        ("exporter",): "sources up",
    }
    for args, fragment in healthy.items():
        status, out = check(capsys, d, *args)
        assert status == 0 and fragment in out, out

    # UNKNOWN: a quantity the GPUs do not report.
    fake.device(0).temperature_memory = 0
    fake.device(1).temperature_memory = 0
    d.wait_for(
        lambda: (
            value(d.metrics(), "accel_temperature_celsius", device="0", uuid=g0, sensor="memory")
            is None
        ),
        what="memory temperature gone",
    )
    status, out = check(
        capsys, d, "temperature", "--warn", "80", "--crit", "90", "--sensor", "memory"
    )
    assert status == 3 and "no memory temperature" in out, out

    # WARNING, then CRITICAL.
    fake.device(1).temperature_gpu = 85
    d.wait_metric("accel_temperature_celsius", 85, device="1", uuid=g1, sensor="gpu")
    status, out = check(capsys, d, "temperature", "--warn", "80", "--crit", "90")
    assert status == 1 and "gpu1 85C" in out and "gpu1_gpu=85;80;90" in out, out
    fake.device(0).temperature_gpu = 97
    d.wait_metric("accel_temperature_celsius", 97, device="0", uuid=g0, sensor="gpu")
    assert check(capsys, d, "temperature", "--warn", "80", "--crit", "90")[0] == 2

    fake.device(1).remapped_pending = 1
    fake.device(0).retired_pending = 1
    fake.device(1).ecc[0][0] = 500  # corrected, volatile
    d.wait_metric("accel_remapped_rows_pending", 1, device="1", uuid=g1)
    d.wait_metric("accel_retired_pages_pending", 1, device="0", uuid=g0)
    d.wait_metric(
        "accel_ecc_errors_total", 500, device="1", uuid=g1, type="corrected", counter="volatile"
    )
    status, out = check(capsys, d, "row-remap")
    assert status == 1 and "gpu1 remapping pending a GPU reset" in out, out
    status, out = check(capsys, d, "retired-pages")
    assert status == 1 and "gpu0 retirement pending a reboot" in out, out
    status, out = check(capsys, d, "ecc", "--warn-corrected", "100")
    assert status == 1 and "gpu1 500 correctable" in out, out

    fake.device(1).remapped_failure = 1
    fake.device(0).retired_pages[1] = 61
    fake.device(0).ecc[1][0] = 2  # uncorrected, volatile
    d.wait_metric("accel_remapped_rows_failure", 1, device="1", uuid=g1)
    d.wait_metric("accel_retired_pages", 61, device="0", uuid=g0, cause="double_bit_ecc")
    d.wait_metric(
        "accel_ecc_errors_total", 2, device="0", uuid=g0, type="uncorrected", counter="volatile"
    )
    status, out = check(capsys, d, "row-remap")
    assert status == 2 and "gpu1 remapping failed" in out, out
    status, out = check(capsys, d, "retired-pages")
    assert status == 2 and "gpu0 61 pages retired" in out, out
    status, out = check(capsys, d, "ecc")
    assert status == 2 and "gpu0 2 uncorrectable" in out, out

    fake.inject_xid(0, 13)
    d.wait_metric("accel_xid_errors_total", 1, device="0", uuid=g0, xid="13")
    status, out = check(capsys, d, "xid", "--window", "10m")
    assert status == 1 and "gpu0 xid 13" in out, out
    assert check(capsys, d, "xid", "--window", "10m", "--ignore-xids", "13")[0] == 0
    fake.inject_xid(1, 79)
    d.wait_metric("accel_xid_errors_total", 1, device="1", uuid=g1, xid="79")
    status, out = check(capsys, d, "xid", "--window", "10m")
    assert status == 2 and "gpu1 xid 79" in out, out

    fake.device(1).lost = 1
    d.wait_metric("accel_device_up", 0, device="1", uuid=g1)
    status, out = check(capsys, d, "gpu-count", "--expected", "2")
    assert status == 2 and "1 up; down: gpu1 gpu_lost" in out, out
    status, out = check(capsys, d, "gpu-count", "--expected", "2", "--exit-codes", "npd")
    assert status == 1


def test_local_mode_polls_the_library_itself(fake_nvml):
    fake = fake_nvml(3)
    env = fake.env()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("check", *args, "--local", env=env)

    ok = run("gpu-count", "--expected", "3")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("GPU-COUNT OK - 3 of 3 expected GPUs present, 3 up |")
    healthy = run("health")  # the verdict records of the in-process poll
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("HEALTH OK - 3 GPUs, all ok |"), healthy.stdout
    fake.device(2).lost = 1
    bad = run("gpu-count", "--expected", "3")
    assert bad.returncode == 2 and "down: gpu2 gpu_lost" in bad.stdout, bad.stdout
    lost = run("health")
    assert lost.returncode == 2 and "gpu2 failed (device_down) -> reset_device" in lost.stdout
    # Without the library: no GPUs at all, and the text says why.
    env["LD_LIBRARY_PATH"] = ""
    none = run("gpu-count", "--expected", "3")
    assert none.returncode == 2 and "0 of 3" in none.stdout and "unavailable" in none.stdout


def test_check_health_follows_the_recovery_action(daemon_factory, fake_nvml, capsys):
    fake = fake_nvml(2)
    d = nvml_daemon(daemon_factory, fake)
    g1 = fake.uuid(1)
    d.wait_metric("accel_device_health", 1, device="1", uuid=g1, state="ok", timeout=40)
    status, out = check(capsys, d, "health")
    assert status == 0 and out.startswith("HEALTH OK - 2 GPUs, all ok |"), out
    fake.device(1).margin_temperature = 3  # 3 degrees before slowing down for heat
    d.wait_metric("accel_device_health", 1, device="1", uuid=g1, state="degraded")
    status, out = check(capsys, d, "health")
    assert status == 1 and "gpu1 degraded (thermal_margin_low)" in out, out
    fake.device(1).recovery_action = 2  # node reboot
    d.wait_metric("accel_device_health", 1, device="1", uuid=g1, state="failed")
    status, out = check(capsys, d, "health")
    assert status == 2 and "gpu1 failed (recovery_action,thermal_margin_low)" in out, out
    assert check(capsys, d, "health", "--exit-codes", "npd")[0] == 1
