"""CUDA checkpoint state through the real daemon with the fake libcuda.so.1."""

from __future__ import annotations

import json

from tests.helpers.daemon import value
from tests.helpers.fakeproc import FakeProc

G0 = "GPU-00000000-1111-2222-3333-444444444444"


def test_checkpoint_state_on_metrics_and_status(daemon_factory, tmp_path, fake_libcuda_dir):
    proc = FakeProc(tmp_path / "proc")
    proc.add(7001)
    proc.add(7002, maps="7f00-7f10 r-xp 0 08:01 1 /usr/lib64/libcuda.so.1\n")
    state = tmp_path / "cuda-state"
    state.write_text("driver_version 12080\npid 7001 0\npid 7002 2 7777\n")
    calls = tmp_path / "cuda-calls"
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps({"devices": [["0", G0, ""]], "processes": [["0", G0, 7001]]}))
    d = daemon_factory(
        {
            "sources": {
                "cuda_checkpoint": {
                    "enabled": True,
                    "interval": "500ms",
                    "proc_path": str(tmp_path / "proc"),
                }
            },
            "workload": {"enabled": False},
        },
        extra_sources="tests.helpers.devices:build",
        env={
            "ACCEL_TEST_DEVICES": str(devices),
            "LD_LIBRARY_PATH": str(fake_libcuda_dir),
            "FAKE_CUDA_STATE": str(state),
            "FAKE_CUDA_CALL_LOG": str(calls),
        },
    )
    d.wait_metric("accel_process_checkpoint_state", 1, uuid=G0, pid="7001", state="running")
    text = d.metrics()
    assert (
        value(text, "accel_process_checkpoint_state", uuid="", pid="7002", state="checkpointed")
        == 1
    )
    assert value(text, "accel_process_checkpoint_state", uuid="", pid="7002", state="running") == 0
    status = d.status()["sources"]["cuda_checkpoint"]
    assert status["restore_thread_ids"]["7002"] == 7777
    assert status["worker_state"] == "ready" and status["driver_version"] == 12080

    # The process is restored: the next poll shows it.
    tmp = state.with_suffix(".tmp")
    tmp.write_text("driver_version 12080\npid 7001 0\npid 7002 5 7777\n")
    tmp.replace(state)
    d.wait_metric("accel_process_checkpoint_state", 1, uuid="", pid="7002", state="restoring")
    called = {line.split()[0] for line in calls.read_text().splitlines()}
    assert called == {"cuCheckpointProcessGetState", "cuCheckpointProcessGetRestoreThreadId"}


def test_old_driver_is_unavailable_not_an_error(daemon_factory, tmp_path, fake_libcuda_dir):
    state = tmp_path / "cuda-state"
    state.write_text("driver_version 12060\n")
    d = daemon_factory(
        {"sources": {"cuda_checkpoint": {"enabled": "auto", "interval": "500ms"}}},
        env={"LD_LIBRARY_PATH": str(fake_libcuda_dir), "FAKE_CUDA_STATE": str(state)},
    )
    d.wait_for(
        lambda: d.status()["sources"]["cuda_checkpoint"]["state"] == "unavailable",
        what="cuda_checkpoint unavailable",
    )
    status = d.status()["sources"]["cuda_checkpoint"]
    assert "12.6" in status["last_error"] and "12.8" in status["last_error"]
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    text = d.metrics()
    assert value(text, "accel_exporter_source_up", source="cuda_checkpoint") is None
