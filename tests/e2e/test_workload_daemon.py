"""Attribution through the real daemon: device data in the store, fake kubelet, fake /proc."""

from __future__ import annotations

import json
import signal
import socket

import yaml

from tests.fakes.kube_api import FakeApiPod, FakeApiServer
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.daemon import value
from tests.helpers.fakeproc import CID, POD_UID, FakeProc, k8s_v2_systemd, slurm_v2
from tests.helpers.pki import make_pki
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
            {"sources": QUIET, "workload": enrich(str(tmp_path / "proc"), kubelet.socket_path)},
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
        stamp = {"stamp_device_series": True, "stamp_labels": ["namespace", "pod"]}
        config = {"sources": QUIET, "workload": enrich(str(tmp_path), kubelet.socket_path, **stamp)}
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
        config["workload"]["k8s"]["stamp_device_series"] = False
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
        {"sources": QUIET, "workload": enrich(str(tmp_path), str(dead))},
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


def test_pod_labels_from_the_api_server(daemon_factory, tmp_path, sock_dir, tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps({"devices": [["0", G0, ""], ["1", G1, ""]]}))
    with (
        FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet,
        FakeApiServer(pki, token="t0ken") as api,
    ):
        kubelet.pods = [FakePod("ml", "train-0", [FakeContainer("t", {"nvidia.com/gpu": [G0]})])]
        api.pods = [
            FakeApiPod("ml", "train-0", "gpu-7", {"team": "vision", "app.kubernetes.io/name": "x"}),
            FakeApiPod("web", "frontend", "gpu-7", {"team": "web"}),  # holds no accelerator
        ]
        pod_labels = {
            "enabled": True,
            "keys": ["team", "app.kubernetes.io/name", "cost-center"],
            "interval": "1s",
        }
        config = {
            "sources": QUIET,
            "kubernetes": {
                "api_server": api.url,
                "token_file": str(token),
                "ca_file": str(pki / "ca.pem"),
            },
            "workload": enrich(str(tmp_path), kubelet.socket_path, pod_labels=pod_labels),
        }
        d = daemon_factory(
            config,
            extra_sources="tests.helpers.devices:build",
            env={"ACCEL_TEST_DEVICES": str(devices), "NODE_NAME": "gpu-7"},
        )
        row = {
            "namespace": "ml",
            "pod": "train-0",
            "label_team": "vision",
            "label_app_kubernetes_io_name": "x",
            "label_cost_center": "",
        }
        d.wait_metric("accel_pod_labels_info", 1, **row, timeout=30)
        text = d.metrics()
        assert 'pod="frontend"' not in text
        check_metrics(text)
        assert api.requests[0]["query"]["fieldSelector"] == ["spec.nodeName=gpu-7"]
        assert d.status()["sources"]["workload"]["k8s_pod_labels"] == "ok"

        # The exported label set is fixed for the daemon's life: a reload that would
        # change it is rejected, and the old configuration keeps running.
        pod_labels["keys"] = ["team"]
        d.config_file.write_text(yaml.safe_dump(config))
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: any(e.get("event") == "reload rejected" for e in d.events),
            what="the reload rejected",
        )
        (problem,) = [e["problem"] for e in d.events if e.get("event") == "reload rejected"]
        assert "workload.k8s.pod_labels" in problem and "restart" in problem
        assert value(d.metrics(), "accel_pod_labels_info", **row) == 1
