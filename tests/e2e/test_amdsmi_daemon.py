"""The daemon as a subprocess with the fake libamd_smi.so: values, faults, once and probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.build import env_for
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.cli import WITHOUT_RICH
from tests.helpers.daemon import REPO, Daemon, samples, value
from tests.helpers.promtool import check_metrics

FAKES = REPO / "tests" / "fakes" / "amdsmi"

CONFIG = {
    "sources": {
        "host": {"enabled": False},
        "nvml": {"enabled": False},  # its worker would be counted with amdsmi's
        "amdsmi": {
            "interval": "1s",
            "slow_interval": "1s",
            "timeout": "3s",
            "processes": True,
            "bootstrap_timeout": "20s",
        },
    },
    # The full profile: these tests check every row the fake serves, per link and engine.
    "outputs": {"prometheus": {"profile": "full"}},
}


def start(daemon_factory: Any, env: dict[str, str]) -> Daemon:
    d: Daemon = daemon_factory(config=CONFIG, env=env)
    d.wait_metric("accel_devices", 8, vendor="amd")
    return d


def ident(fake: FakeAmdSmi, i: int) -> dict[str, str]:
    return {"device": str(i), "uuid": expected.uuid(fake.device(i))}


def test_eight_gpu_node_exact_values_and_valid_exposition(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    d = start(daemon_factory, amdsmi_env)
    d.wait_metric("accel_amd_partition_id", **ident(amdsmi_fake, 7))  # slow fields arrived
    text = d.metrics()
    got = samples(text)
    for i in range(8):
        dev = amdsmi_fake.device(i)
        want = expected.series(dev, i, processes=True)
        assert {k: got.get(k) for k in want} == want
        assert value(got, "accel_device_info", **expected.info(dev, i)) == 1
        me = ident(amdsmi_fake, i)
        assert value(got, "accel_temperature_celsius", sensor="edge", **me) is None
        assert value(got, "accel_amd_mm_activity_ratio", **me) is None
    assert value(got, "accel_exporter_source_up", source="amdsmi") == 1
    check_metrics(text)


def test_lost_gpu_is_down_with_reason_and_the_rest_unaffected(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    d = start(daemon_factory, amdsmi_env)
    lost = ident(amdsmi_fake, 2)
    amdsmi_fake.device(2).lost_status = state.DRIVER_NOT_LOADED
    d.wait_metric("accel_device_up", 0, **lost)
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", reason="gpu_lost", **lost) == 1
    assert value(got, "accel_utilization_ratio", **lost) is None
    assert value(got, "accel_ecc_errors_total", type="corrected", counter="", **lost) is None
    for i in (0, 1, 3, 4, 5, 6, 7):
        assert value(got, "accel_device_up", **ident(amdsmi_fake, i)) == 1
    assert value(got, "accel_exporter_source_up", source="amdsmi") == 1
    amdsmi_fake.device(2).lost_status = 0
    d.wait_metric("accel_device_up", 1, **lost)
    d.wait_metric("accel_utilization_ratio", amdsmi_fake.device(2).gfx_activity / 100, **lost)


def test_events_reach_metrics(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    d = start(daemon_factory, amdsmi_env)
    before = time.time()
    amdsmi_fake.push_event(1, state.EVT_THERMAL_THROTTLE, "throttle")
    labels = {**ident(amdsmi_fake, 1), "event": "thermal_throttle"}
    d.wait_metric("accel_device_events_total", 1, **labels)
    stamp = value(d.metrics(), "accel_device_event_last_timestamp_seconds", **labels)
    assert stamp is not None and before <= stamp <= time.time()


# -- once and probe ---------------------------------------------------------------


UNRELATED_OFF = ("--sources.host.enabled=false", "--sources.nvml.enabled=false")


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_EXPORTER_", "ROCM_"))}
    base.pop("FAKE_AMDSMI_STATE", None)
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), str(WITHOUT_RICH)])
    return subprocess.run(
        # NVML off too: its auto probe would start a worker in every command here.
        [sys.executable, "-m", "exporter", *args, *UNRELATED_OFF],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_once_and_probe_with_the_library(
    amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    once = cli("once", "--format", "json", env=amdsmi_env)
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)["amdsmi"]
    assert doc["ok"] is True
    devices = [r for r in doc["readings"] if r["metric"] == "accel_devices"]
    assert devices == [{"metric": "accel_devices", "labels": {"vendor": "amd"}, "value": 8.0}]
    probe = cli("probe", env=amdsmi_env)
    assert probe.returncode == 0
    line = next(x for x in probe.stdout.splitlines() if x.startswith("amdsmi"))
    assert line.split()[1:3] == ["auto", "ok"]


def test_the_library_is_found_through_rocm_path_alone(
    amdsmi_root: Path, amdsmi_fake: FakeAmdSmi
) -> None:
    env = {**env_for(amdsmi_root, {}, rocm_home=False), **amdsmi_fake.env}
    assert "ROCM_HOME" not in env
    once = cli("once", "--format", "json", env=env)  # cli() drops the caller's ROCM_*
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)["amdsmi"]
    assert doc["ok"] is True
    assert [r["value"] for r in doc["readings"] if r["metric"] == "accel_devices"] == [8.0]


def test_once_and_probe_without_the_library(tmp_path: Path) -> None:
    missing = env_for(tmp_path / "no-rocm", {})
    once = cli("once", env=missing)
    assert once.returncode == 0, once.stderr  # auto: unavailable is not a failure
    assert "amdsmi: unavailable" in once.stderr and "libamd_smi.so" in once.stderr
    assert "accel_exporter_source_unavailable_info{reason=" in once.stdout
    probe = cli("probe", env=missing)
    line = next(x for x in probe.stdout.splitlines() if x.startswith("amdsmi"))
    assert line.split()[1:3] == ["auto", "unavailable"] and "libamd_smi.so" in line
    # Where the amdsmi package looked, in its order, not the KeyError it fails with.
    assert "KeyError" not in line and "KeyError" not in once.stderr, line
    looked = line.split("looked in ", 1)[1]
    assert looked.startswith(f"{tmp_path}/no-rocm/lib/libamd_smi.so, "), line
    assert "/usr/lib64/libamd_smi.so" in looked and "set ROCM_PATH" in looked, line
    forced = cli("once", "--sources.amdsmi.enabled=true", env=missing)
    assert forced.returncode == 1  # asked for explicitly, its absence is an error
    assert "amdsmi: library_not_found: " in forced.stderr  # the down reason names the cause


def test_probe_with_the_library_but_no_driver(amdsmi_root: Path) -> None:
    probe = cli("probe", env=env_for(amdsmi_root, {}))  # no FAKE_AMDSMI_STATE: no amdgpu
    line = next(x for x in probe.stdout.splitlines() if x.startswith("amdsmi"))
    assert line.split()[1:3] == ["auto", "unavailable"] and "driver_not_loaded" in line


def test_probe_init_error_without_the_amdgpu_driver_is_unavailable(
    amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi, tmp_path: Path
) -> None:
    # libamd_smi.so is installed (an NVIDIA node with ROCm packages, say), amdgpu is not.
    amdsmi_fake.state.init_status = state.INIT_ERROR
    roots = ["--sources.amdsmi.sys-path", str(tmp_path), "--sources.amdsmi.dev-path", str(tmp_path)]
    probe = cli("probe", *roots, env=amdsmi_env)
    line = next(x for x in probe.stdout.splitlines() if x.startswith("amdsmi"))
    assert line.split()[1:3] == ["auto", "unavailable"]
    assert "amdsmi_init: init_error" in line and "kfd missing" in line
    (tmp_path / "module" / "amdgpu").mkdir(parents=True)
    (tmp_path / "kfd").touch()
    probe = cli("probe", *roots, env=amdsmi_env)  # the driver is there: a real failure
    line = next(x for x in probe.stdout.splitlines() if x.startswith("amdsmi"))
    assert line.split()[1:3] == ["auto", "error"], line
    assert "amdsmi_init failed: init_error" in line


def test_probe_with_a_library_older_than_the_package(tmp_path: Path) -> None:
    # A libamd_smi.so without one of the functions the wrapper binds at import.
    stubs = tmp_path / "stubs.c"
    subprocess.run([sys.executable, str(FAKES / "gen_stubs.py"), str(stubs)], check=True)
    lines = [x for x in stubs.read_text().splitlines() if " amdsmi_get_gpu_activity(" not in x]
    stubs.write_text("\n".join(lines) + "\n")
    (tmp_path / "old" / "lib").mkdir(parents=True)
    lib = tmp_path / "old" / "lib" / "libamd_smi.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(stubs)], check=True)
    probe = cli("probe", env=env_for(tmp_path / "old", {}))
    line = next(x for x in probe.stdout.splitlines() if x.startswith("amdsmi"))
    assert line.split()[1:3] == ["auto", "unavailable"]
    assert "amdsmi_get_gpu_activity" in line and "ROCm release" in line


def test_health_verdict_from_what_amdsmi_gives(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    d = start(daemon_factory, amdsmi_env)
    one, two = ident(amdsmi_fake, 1), ident(amdsmi_fake, 2)
    d.wait_metric("accel_amd_xgmi_link_up", 1, link="0", **one)
    d.wait_metric("accel_device_health", 1, state="ok", **one)
    # An XGMI link that was up goes down: degraded.
    amdsmi_fake.device(1).xgmi_link_status[0] = 0
    d.wait_metric("accel_device_health_reason_info", 1, reason="link_down", **one)
    assert value(d.metrics(), "accel_device_health", state="degraded", **one) == 1
    # Uncorrectable ECC errors grow on another GPU: degraded too.
    amdsmi_fake.device(2).ecc_total[1] += 3
    d.wait_metric("accel_device_health_reason_info", 1, reason="ecc_uncorrected_growth", **two)
    # A lost GPU: failed.
    amdsmi_fake.device(2).lost_status = state.DRIVER_NOT_LOADED
    d.wait_metric("accel_device_health", 1, state="failed", **two)
    got = samples(d.metrics())
    assert value(got, "accel_device_health_reason_info", reason="device_down", **two) == 1
    assert value(got, "accel_device_health", state="ok", **ident(amdsmi_fake, 0)) == 1
