"""A shared GPU through the real daemon: two pods' processes on one time-sliced GPU give
one per-pod row each, whose memory adds up to the GPU's process total."""

from __future__ import annotations

import json

from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.daemon import value
from tests.helpers.fakeproc import CID, CID2, POD_UID, POD_UID2, FakeProc, k8s_v2_systemd
from tests.helpers.promtool import check_metrics
from tests.helpers.workload import QUIET, enrich

G0 = "GPU-00000000-1111-2222-3333-444444444444"
GiB = 1 << 30


def test_per_pod_memory_and_utilization_on_a_shared_gpu(daemon_factory, tmp_path, sock_dir):
    proc = FakeProc(tmp_path / "proc")
    # Pod a runs two processes (a trainer and a data loader), pod b one.
    proc.add(100, cgroup=k8s_v2_systemd(POD_UID, CID), environ={"HOSTNAME": "a"})
    proc.add(101, cgroup=k8s_v2_systemd(POD_UID, CID), environ={"HOSTNAME": "a"})
    proc.add(200, cgroup=k8s_v2_systemd(POD_UID2, CID2), environ={"HOSTNAME": "b"})
    used = {100: 6 * GiB, 101: 1 * GiB, 200: 3 * GiB}
    devices = tmp_path / "devices.json"
    devices.write_text(
        json.dumps(
            {
                "devices": [["0", G0, "00000000:17:00.0"]],
                "processes": [["0", G0, pid, float(b)] for pid, b in used.items()],
                "process_utilization": [
                    ["0", G0, 100, 0.5],
                    ["0", G0, 101, 0.05],
                    ["0", G0, 200, 0.25],
                ],
            }
        )
    )
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        # Time-slicing replicas of the same GPU (GPU-...::N), one per pod.
        kubelet.pods = [
            FakePod("ml", "a", [FakeContainer("main", {"nvidia.com/gpu": [f"{G0}::0"]})]),
            FakePod("ml", "b", [FakeContainer("main", {"nvidia.com/gpu": [f"{G0}::1"]})]),
        ]
        d = daemon_factory(
            {"sources": QUIET, "workload": enrich(str(tmp_path / "proc"), kubelet.socket_path)},
            extra_sources="tests.helpers.devices:build",
            env={"ACCEL_TEST_DEVICES": str(devices)},
        )
        a = {"device": "0", "uuid": G0, "namespace": "ml", "pod": "a", "container": "main"}
        b = {**a, "pod": "b"}
        d.wait_metric("accel_workload_memory_used_bytes", 7 * GiB, **a, timeout=30)
        text = d.metrics()
        rows = {
            pod: value(text, "accel_workload_memory_used_bytes", **labels)
            for pod, labels in (("a", a), ("b", b))
        }
        assert rows == {"a": 7 * GiB, "b": 3 * GiB}
        assert sum(rows.values()) == sum(used.values())  # the GPU's process total
        assert value(text, "accel_workload_utilization_ratio", **a) == 0.55
        assert value(text, "accel_workload_utilization_ratio", **b) == 0.25
        check_metrics(text)
