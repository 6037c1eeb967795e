"""Daemon-level behaviour under faults: hung sources and workers, staleness, shutdown."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.helpers.daemon import value
from tests.helpers.test_sources import control_writer


@pytest.fixture
def ctl(tmp_path):
    return control_writer(tmp_path / "control.json", value=3)


def host_polls(d) -> int:
    return int(d.status()["sources"]["host"]["polls"])


@pytest.mark.parametrize("mode", ["hang", "block"])
def test_hung_source_is_isolated_and_recovers(daemon_factory, ctl, mode):
    d = daemon_factory(
        {"sources": {"host": {"interval": "500ms"}}},
        extra_sources="tests.helpers.test_sources:build",
        env={
            "ACCEL_TEST_CONTROL": ctl.path,
            "ACCEL_TEST_INTERVAL": "0.5",
            "ACCEL_TEST_TIMEOUT": "1.0",
        },
    )
    d.wait_metric("accel_devices", 3, vendor="test")
    d.wait_metric("accel_exporter_source_up", 1, source="test")
    ctl(mode)
    d.wait_metric("accel_exporter_source_down_reason_info", 1, source="test", reason="timeout")
    assert value(d.metrics(), "accel_exporter_source_up", source="test") == 0
    # While the source stays hung (it never returns by itself), every endpoint answers
    # and the other source keeps its schedule.
    before = host_polls(d)
    for _ in range(5):
        assert d.get("/healthz", timeout=5).status == 200
        text = d.metrics(timeout=5)
        assert value(text, "accel_exporter_source_up", source="host") == 1
    d.wait_for(lambda: host_polls(d) >= before + 3, what="host keeps polling")
    status = d.status()["sources"]["test"]
    assert status["state"] == "failing" and status["reason"] == "timeout"
    ctl("ok", value=5)
    d.wait_metric("accel_exporter_source_up", 1, source="test", timeout=30)
    d.wait_metric("accel_devices", 5, vendor="test")
    assert (
        value(d.metrics(), "accel_exporter_source_errors_total", source="test", reason="timeout")
        >= 1
    )


def test_stale_data_disappears(daemon_factory, ctl):
    d = daemon_factory(
        extra_sources="tests.helpers.test_sources:build",
        env={
            "ACCEL_TEST_CONTROL": ctl.path,
            "ACCEL_TEST_INTERVAL": "0.5",
            "ACCEL_TEST_TIMEOUT": "30",
            "ACCEL_TEST_STALE": "1.5",
        },
    )
    d.wait_metric("accel_devices", 3, vendor="test")
    ctl("hang")  # the poll now outlives stale_after but not its timeout
    d.wait_for(
        lambda: value(d.metrics(), "accel_devices", vendor="test") is None,
        what="stale series to disappear",
    )
    text = d.metrics()
    assert value(text, "accel_exporter_source_up", source="test") == 0
    assert value(text, "accel_exporter_source_down_reason_info", source="test", reason="stale") == 1
    ctl("ok", value=4)
    d.wait_metric("accel_devices", 4, vendor="test")


@pytest.mark.parametrize(
    ("mode", "reason"), [("hang", "timeout"), ("crash", "crashed"), ("garbage", "protocol_error")]
)
def test_bad_worker_in_daemon(daemon_factory, ctl, mode, reason):
    d = daemon_factory(
        extra_sources="tests.helpers.test_sources:build_worker",
        env={
            "ACCEL_TEST_CONTROL": ctl.path,
            "ACCEL_TEST_INTERVAL": "0.5",
            "ACCEL_TEST_TIMEOUT": "1.0",
        },
    )
    d.wait_metric("accel_device_up", 1, device="0", uuid="TEST-0")
    first_pid = d.status()["sources"]["testdev"]["worker_pid"]
    assert first_pid in d.descendants()
    ctl(mode)
    d.wait_metric("accel_device_down_reason_info", 1, device="1", uuid="TEST-1", reason=reason)
    text = d.metrics(timeout=5)
    assert value(text, "accel_device_up", device="0", uuid="TEST-0") == 0
    assert (
        value(
            text,
            "accel_device_info",
            vendor="test",
            device="0",
            uuid="TEST-0",
            model="Test GPU",
            pci_bus_id="",
            serial="",
            vbios="",
            driver_version="",
            cuda_driver_version="",
            mig_mode="",
            compute_partition="",
            memory_partition="",
            partition="",
            physical_gpu="",
        )
        == 1
    )
    d.wait_for(lambda: first_pid not in d.descendants(), what="old worker reaped")
    ctl("ok", value=7)
    d.wait_metric("accel_device_up", 1, device="0", uuid="TEST-0", timeout=30)
    d.wait_metric("accel_power_watts", 7, device="0", uuid="TEST-0")
    assert value(d.metrics(), "accel_exporter_worker_restarts_total", source="testdev") >= 1
    workers = d.descendants()
    assert len(workers) == 1 and first_pid not in workers
    code, _ = d.stop()
    assert code == 0
    assert d.leftover_children() == set()


@pytest.mark.parametrize("mode", ["block", "worker_hang"])
def test_sigterm_exits_0_within_5s_during_a_hung_poll(daemon_factory, ctl, mode):
    builder = "build_worker" if mode == "worker_hang" else "build"
    d = daemon_factory(
        extra_sources=f"tests.helpers.test_sources:{builder}",
        env={
            "ACCEL_TEST_CONTROL": ctl.path,
            "ACCEL_TEST_INTERVAL": "0.5",
            "ACCEL_TEST_TIMEOUT": "30",
        },
    )
    if mode == "worker_hang":
        d.wait_metric("accel_device_up", 1, device="0", uuid="TEST-0")
        ctl("hang")
        d.wait_for(lambda: d.status()["sources"]["testdev"]["polling"], what="a poll in flight")
    else:
        d.wait_metric("accel_devices", 3, vendor="test")
        ctl("block")
        d.wait_for(lambda: d.status()["sources"]["test"]["polling"], what="a poll in flight")
    time.sleep(0.3)
    d.descendants()
    d.signal(signal.SIGTERM)
    try:
        code = d.proc.wait(timeout=5.0)  # the requirement itself: gone within 5 s
    except subprocess.TimeoutExpired:
        pytest.fail("daemon did not exit within 5 s of SIGTERM")
    assert code == 0
    assert d.leftover_children() == set()
    assert any(e.get("event") == "stopped" for e in d.events)
