"""The daemon with Neuron devices on a fake host and a fake ``neuron-monitor`` executable.

The fake prints the documented report schema, one JSON document per line, and
records every report it printed, so the counters can be checked exactly:
per-period deltas times reports printed, across the child's restarts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.fakes.neuron.control import FakeMonitor, install, make_host, serial
from tests.helpers.cli import cli_env
from tests.helpers.daemon import Daemon, samples, value
from tests.helpers.promtool import check_metrics

OFF = {"enabled": False}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    # The check subcommand runs in this process and configures logging for it.
    yield
    structlog.reset_defaults()


STATUS_DELTA = {"completed": 3, "timed_out": 1}
ECC_DELTA = {
    "neuron_device_index": 1,
    "mem_ecc_corrected": 2,
    "sram_ecc_corrected": 1,
    "sram_ecc_uncorrected": 1,
}
RUNTIME = {
    "tag": "train",
    "pid": 777,
    "util": {"0": 50.0, "3": 25.5},
    "memory": {"0": {"tensors": 100, "constants": 5}, "3": {"model_code": 7}},
    "host": 11,
    "device": 112,
    "vcpu": {"user": 12.5, "system": 2.5},
    "status": STATUS_DELTA,
    "errors": {"hardware": 1},
    "latency": {"p50": 0.25, "p99": 0.5},
}


def config(host: Path, **neuron: Any) -> dict[str, Any]:
    others = ("host", "nvml", "amdsmi", "tpu", "ccl_ras", "ccl_inspector")
    return {
        "sources": {
            **{name: OFF for name in others},
            "neuron": {"interval": "1s", "host_root": str(host), **neuron},
        }
    }


def ident(i: int) -> dict[str, str]:
    return {"device": str(i), "uuid": serial(i)}


def start(
    daemon_factory: Any, tmp_path: Path, devices: int = 2, **scenario: Any
) -> tuple[Daemon, FakeMonitor]:
    host = make_host(tmp_path / "host", devices)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    monitor.set(devices=devices, cores_per_device=2, **scenario)
    d = daemon_factory(config(host, command=monitor.command))
    return d, monitor


def counted(d: Daemon, monitor: FakeMonitor, reports: int) -> None:
    """Wait until the counters hold exactly ``reports`` periods' deltas."""
    d.wait_for(lambda: monitor.printed >= reports, timeout=60, what=f"{reports} reports")
    d.wait_metric(
        "accel_neuron_execution_status_total", 3 * reports, status="completed", timeout=30
    )
    got = samples(d.metrics())
    assert value(got, "accel_neuron_execution_status_total", status="timed_out") == reports
    assert value(got, "accel_neuron_execution_errors_total", error="hardware") == reports
    assert value(got, "accel_ecc_errors_total", **ident(1), type="corrected", counter="") == (
        3 * reports
    )
    assert value(got, "accel_ecc_errors_total", **ident(1), type="uncorrected", counter="") == (
        reports
    )


def test_values_from_the_default_command_on_path(daemon_factory: Any, tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", 2)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    monitor.set(devices=2, cores_per_device=2, runtimes=[RUNTIME], ecc=[ECC_DELTA], limit=3)
    bin_dir = tmp_path / "bin"
    install(bin_dir, monitor)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    d = daemon_factory(config(host), env=env)  # command: the default, ["neuron-monitor"]
    counted(d, monitor, 3)
    got = samples(d.metrics())
    assert value(got, "accel_devices", vendor="aws") == 2
    assert value(got, "accel_neuroncore_utilization_ratio", **ident(0), core="0") == 0.5
    assert value(got, "accel_neuroncore_utilization_ratio", **ident(1), core="3") == 0.255
    assert value(got, "accel_memory_used_bytes", **ident(0)) == 105
    assert value(got, "accel_memory_used_bytes", **ident(1)) == 7
    assert value(got, "accel_memory_total_bytes", **ident(1)) == 32 * (1 << 30)
    assert value(got, "accel_neuron_memory_used_bytes", **ident(0), category="tensors") == 100
    assert value(got, "accel_neuron_memory_used_bytes", **ident(1), category="model_code") == 7
    latency = {"runtime": "train", "latency": "total", "percentile": "p99"}
    assert value(got, "accel_neuron_execution_latency_seconds", **latency) == 0.5
    assert value(got, "accel_neuron_runtime_vcpu_usage_ratio", runtime="train", mode="user") == (
        0.125
    )
    location = {"runtime": "train", "location": "neuron_device"}
    assert value(got, "accel_neuron_runtime_memory_used_bytes", **location) == 112
    assert value(got, "accel_neuron_runtimes") == 1
    info = [dict(k[1]) for k in got if k[0] == "accel_device_info"]
    assert {(i["uuid"], i["model"], i["driver_version"]) for i in info} == {
        (serial(0), "Trainium", "2.19.64.0"),
        (serial(1), "Trainium", "2.19.64.0"),
    }
    assert value(got, "accel_exporter_source_up", source="neuron") == 1
    check_metrics(d.metrics())


def test_idle_devices_are_counted(daemon_factory: Any, tmp_path: Path) -> None:
    d, _ = start(daemon_factory, tmp_path, devices=16, runtimes=[])
    d.wait_metric("accel_neuron_runtimes", 0)
    got = samples(d.metrics())
    assert value(got, "accel_devices", vendor="aws") == 16
    for i in range(16):
        assert value(got, "accel_device_up", **ident(i)) == 1
        assert value(got, "accel_memory_used_bytes", **ident(i)) == 0
    assert not [k for k in got if k[0] == "accel_neuroncore_utilization_ratio"]
    from exporter.cli import main

    assert main(["check", "gpu-count", "--expected", "16", "--vendor", "aws", "--url", d.url]) == 0
    assert main(["check", "gpu-count", "--expected", "17", "--vendor", "aws", "--url", d.url]) == 2


def test_restarts_mid_stream_neither_reset_nor_double(daemon_factory: Any, tmp_path: Path) -> None:
    # Each life prints two reports then exits 1; six reports in all.
    d, monitor = start(
        daemon_factory, tmp_path, runtimes=[RUNTIME], ecc=[ECC_DELTA], exit_after=2, limit=6
    )
    counted(d, monitor, 6)
    d.wait_for(lambda: d.status()["sources"]["neuron"]["monitor"]["restarts"] >= 2, what="restarts")
    restarts = value(d.metrics(), "accel_exporter_worker_restarts_total", source="neuron")
    assert restarts is not None and restarts >= 2
    assert d.status()["sources"]["neuron"]["monitor"]["last_reason"] in ("exited", "stalled")
    # Lives after the sixth report print nothing: the totals stay exact.
    d.wait_for(
        lambda: d.status()["sources"]["neuron"]["monitor"]["restarts"] >= 3,
        what="another restart",
        timeout=30,
    )
    counted(d, monitor, 6)


def test_a_stall_is_detected_and_the_child_restarted(daemon_factory: Any, tmp_path: Path) -> None:
    d, monitor = start(daemon_factory, tmp_path, runtimes=[RUNTIME], ecc=[ECC_DELTA], limit=2)
    counted(d, monitor, 2)
    monitor.set(stall=True)
    d.wait_metric("accel_device_up", 0, **ident(0), timeout=30)
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", **ident(0), reason="stalled") == 1
    assert value(got, "accel_exporter_source_up", source="neuron") == 0
    # Counters stay as they were while the child is down.
    assert value(got, "accel_neuron_execution_status_total", status="completed") == 6
    status = d.status()["sources"]["neuron"]
    assert status["monitor"]["last_reason"] == "stalled" and status["reason"] == "stalled"
    monitor.drop("stall")
    monitor.set(limit=4)
    d.wait_metric("accel_device_up", 1, **ident(0), timeout=30)
    counted(d, monitor, 4)


def test_a_one_megabyte_line_is_read(daemon_factory: Any, tmp_path: Path) -> None:
    d, _monitor = start(daemon_factory, tmp_path, runtimes=[RUNTIME], pad=1_000_000, limit=2)
    d.wait_metric("accel_neuroncore_utilization_ratio", 0.255, **ident(1), core="3")
    d.wait_metric("accel_neuron_execution_status_total", 6, status="completed", timeout=30)
    assert d.status()["sources"]["neuron"]["monitor"]["rejected_lines"] == 0


def test_a_line_over_the_limit_is_dropped_not_fatal(daemon_factory: Any, tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", 2)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    monitor.set(devices=2, cores_per_device=2, runtimes=[RUNTIME], pad=200_000, limit=1)
    d = daemon_factory(config(host, command=monitor.command, max_line_bytes=65536))
    d.wait_for(
        lambda: d.status()["sources"]["neuron"]["monitor"]["rejected_lines"] >= 1,
        what="the long line rejected",
    )
    got = samples(d.metrics())
    assert value(got, "accel_neuron_execution_status_total", status="completed") is None
    monitor.drop("pad")
    monitor.set(limit=3)
    # Two short reports after the long one: its deltas were not counted.
    d.wait_metric("accel_neuron_execution_status_total", 6, status="completed", timeout=30)


def test_garbage_keeps_the_counters_and_says_why(daemon_factory: Any, tmp_path: Path) -> None:
    d, monitor = start(daemon_factory, tmp_path, runtimes=[RUNTIME], ecc=[ECC_DELTA], limit=2)
    counted(d, monitor, 2)
    monitor.set(garbage=True, limit=10**6)
    d.wait_for(
        lambda: "not JSON" in d.status()["sources"]["neuron"]["last_rejected_line"],
        what="the garbage line rejected",
    )
    d.wait_metric("accel_device_up", 0, **ident(0), timeout=30)
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", **ident(0), reason="bad_report") == 1
    assert value(got, "accel_neuron_execution_status_total", status="completed") == 6
    monitor.drop("garbage")
    monitor.set(limit=monitor.printed + 1)
    d.wait_metric("accel_device_up", 1, **ident(0), timeout=30)


def test_bad_fields_drop_their_group_only(daemon_factory: Any, tmp_path: Path) -> None:
    bad = {**RUNTIME, "util": {"0": 150.0}, "status": {"completed": -3}}
    d, _monitor = start(daemon_factory, tmp_path, runtimes=[bad], ecc=[ECC_DELTA], limit=2)
    d.wait_metric("accel_ecc_errors_total", 6, **ident(1), type="corrected", counter="")
    got = samples(d.metrics())
    assert not [k for k in got if k[0] == "accel_neuroncore_utilization_ratio"]
    assert value(got, "accel_neuron_execution_status_total", status="completed") == 0
    assert value(got, "accel_memory_used_bytes", **ident(0)) == 105  # memory was fine
    problems = d.status()["sources"]["neuron"]["report_problems"]
    assert any("150" in p for p in problems) and any("-3" in p for p in problems), problems


def test_once_and_probe(tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", 2)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    monitor.set(devices=2, cores_per_device=2, runtimes=[RUNTIME])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(host, command=monitor.command)))
    env = cli_env()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "exporter", *args, "--config.file", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    once = cli("once", "--format", "json")
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)["neuron"]
    assert doc["ok"] is True, doc
    readings = {(r["metric"], tuple(r["labels"].values())): r["value"] for r in doc["readings"]}
    assert readings[("accel_devices", ("aws",))] == 2
    assert readings[("accel_neuroncore_utilization_ratio", ("1", serial(1), "3"))] == 0.255
    probe = cli("probe")
    line = next(x for x in probe.stdout.splitlines() if x.startswith("neuron"))
    assert line.split()[1:3] == ["auto", "ok"], probe.stdout
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(config(tmp_path / "none", command=["no-such-neuron-monitor"])))
    probe = subprocess.run(
        [sys.executable, "-m", "exporter", "probe", "--config.file", str(empty)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = next(x for x in probe.stdout.splitlines() if x.startswith("neuron"))
    assert line.split()[1:3] == ["auto", "unavailable"], probe.stdout


def test_shutdown_leaves_no_process(daemon_factory: Any, tmp_path: Path) -> None:
    # One report, then silence: the stalled child is replaced; the new one (alive,
    # silent) must go with the daemon.
    d, _ = start(daemon_factory, tmp_path, runtimes=[RUNTIME], limit=1)
    d.wait_for(
        lambda: d.status()["sources"]["neuron"]["monitor"]["restarts"] >= 1,
        what="a restart",
        timeout=30,
    )
    pid = d.wait_for(lambda: d.status()["sources"]["neuron"]["monitor"]["pid"], what="a child")
    assert pid in d.descendants()
    code, _ = d.stop()
    assert code == 0
    assert not d.leftover_children()
