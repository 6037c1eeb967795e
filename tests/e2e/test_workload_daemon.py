"""Attribution through the real daemon: device data in the store, fake kubelet, fake /proc."""

from __future__ import annotations

import json
import signal
import socket

import yaml

from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.daemon import value
from tests.helpers.fakeproc import CID, POD_UID, FakeProc, k8s_v2_systemd, slurm_v2
from tests.helpers.promtool import check_metrics
from tests.helpers.workload import QUIET, enrich, job_row, process_row, workload_row

G0, G1 = "GPU-00000000-1111-2222-3333-444444444444", "GPU-55555555-6666-7777-8888-999999999999"
JOB = job_row("1", G1, "31337", "alice", "a100")


def test_attribution_on_metrics(daemon_factory, tmp_path, sock_dir):
    proc = FakeProc(tmp_path / "proc")
    proc.add(100, cgroup=k8s_v2_systemd())
    env = {"SLURM_JOB_USER": "alice", "SLURM_JOB_PARTITION": "a100"}
    proc.add(200, cgroup=slurm_v2("31337"), environ=env)
    devices = tmp_path / "devices.json"
    devices.write_text(
        json.dumps(
            {
                "devices": [["0", G0, "00000000:17:00.0"], ["1", G1, "00000000:2A:00.0"]],
                "processes": [["0", G0, 100], ["1", G1, 200], ["1", G1, 999]],
            }
        )
    )
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        kubelet.pods = [
            FakePod("ml", "train-0", [FakeContainer("trainer", {"nvidia.com/gpu": [G0]})]),
            FakePod("ml", "idle", [FakeContainer("c", {"nvidia.com/gpu": ["nvidia1"]})]),
        ]
        d = daemon_factory(
            {"sources": QUIET, "enrich": enrich(str(tmp_path / "proc"), kubelet.socket_path)},
            extra_sources="tests.helpers.devices:build",
            env={"ACCEL_TEST_DEVICES": str(devices)},
        )
        ids = {"pod_uid": POD_UID, "container_id": f"containerd://{CID}"}
        trainer = {"namespace": "ml", "pod": "train-0", "container": "trainer"}
        d.wait_metric(
            "accel_process_workload_info", 1, **process_row("0", G0, 100, **trainer, **ids)
        )
        text = d.metrics()
        assert value(text, "accel_device_workload_info", **workload_row("0", G0, **trainer)) == 1
        idle = workload_row("1", G1, "ml", "idle", "c")
        assert value(text, "accel_device_workload_info", **idle) == 1
        assert value(text, "accel_device_job_info", **JOB) == 1
        assert value(text, "accel_workload_attribution_errors_total", reason="pid_exited") >= 1
        assert value(text, "accel_exporter_source_up", source="workload") == 1
        status = d.status()["sources"]["workload"]
        assert status["k8s"] == "ok" and status["k8s_assignments"] == 2

        # The kubelet goes away (its socket with it): once a kubelet answered, that is a
        # failure even with enabled: auto; the last answer is kept for a while.
        kubelet.stop()
        down = {"source": "workload", "reason": "kubelet_socket_missing"}
        d.wait_metric("accel_exporter_source_down_reason_info", 1, **down, timeout=30)
        text = d.metrics()
        assert value(text, "accel_device_job_info", **JOB) == 1
        check_metrics(text)


def test_stamping_device_series_is_opt_in_and_reloadable(daemon_factory, tmp_path, sock_dir):
    devices = tmp_path / "devices.json"
    devices.write_text(
        json.dumps(
            {
                "devices": [["0", G0, "00000000:17:00.0"], ["1", G1, "00000000:2A:00.0"]],
                "utilization": [["0", G0, 0.75], ["1", G1, 0.5]],
            }
        )
    )
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        kubelet.pods = [FakePod("ml", "train-0", [FakeContainer("t", {"nvidia.com/gpu": [G0]})])]
        stamp = {"stamp_device_series": True, "pod_label_allowlist": ["namespace", "pod"]}
        config = {"sources": QUIET, "enrich": enrich(str(tmp_path), kubelet.socket_path, **stamp)}
        d = daemon_factory(
            config,
            extra_sources="tests.helpers.devices:build",
            env={"ACCEL_TEST_DEVICES": str(devices)},
        )
        first = {"device": "0", "uuid": G0, "namespace": "ml", "pod": "train-0"}
        d.wait_metric("accel_utilization_ratio", 0.75, **first)
        text = d.metrics()
        second = {"device": "1", "uuid": G1, "namespace": "", "pod": ""}
        assert value(text, "accel_utilization_ratio", **second) == 0.5
        check_metrics(text)

        # Turned off by a reload: the plain series come back.
        config["enrich"]["k8s"]["stamp_device_series"] = False
        d.config_file.write_text(yaml.safe_dump(config))
        d.signal(signal.SIGHUP)
        d.wait_metric("accel_utilization_ratio", 0.75, device="0", uuid=G0)


def test_a_kubelet_socket_nobody_answers_leaves_the_source_up(daemon_factory, tmp_path, sock_dir):
    # M4: the chart mounts the socket on every node; where the exporter cannot use it,
    # the workload source must not be down (AccelExporterSourceDown would page).
    dead = sock_dir / "kubelet.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(dead))
    server.close()
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps({"devices": [["0", G0, "00000000:17:00.0"]]}))
    d = daemon_factory(
        {"sources": QUIET, "enrich": enrich(str(tmp_path), str(dead))},
        extra_sources="tests.helpers.devices:build",
        env={"ACCEL_TEST_DEVICES": str(devices)},
    )
    counted = {"reason": "connect_failed"}
    d.wait_for(
        lambda: (
            (value(d.metrics(), "accel_workload_attribution_errors_total", **counted) or 0) >= 2
        ),
        timeout=30,
        what="two counted kubelet attempts",
    )
    text = d.metrics()
    assert value(text, "accel_exporter_source_up", source="workload") == 1
    assert "accel_device_workload_info{" not in text
    assert d.status()["sources"]["workload"]["k8s"].startswith("inactive: connect_failed")
