"""The workload source in-process: store data + fake kubelet + fake /proc -> join readings."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from pathlib import Path

import pytest

from exporter.config.workload import K8sEnrichConfig, SlurmEnrichConfig, WorkloadConfig
from exporter.errors import SourceError
from exporter.sources.workload import WorkloadSource
from exporter.store import Store
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.devices import info, process, snapshot
from tests.helpers.fakeproc import CID, POD_UID, FakeProc, k8s_v2_systemd, slurm_v1
from tests.helpers.privileges import NOBODY, run_as

G0, G1 = "GPU-00000000-1111-2222-3333-444444444444", "GPU-55555555-6666-7777-8888-999999999999"


@pytest.fixture
def setup(tmp_path):
    proc = FakeProc(tmp_path / "proc")
    proc.add(100, cgroup=k8s_v2_systemd(), environ={"HOSTNAME": "train-0"})
    proc.add(200, cgroup=slurm_v1("4242", 0), environ={"SLURM_JOB_PARTITION": "gpu"})
    proc.add(300, cgroup="garbage\n")
    # pid 400 is listed by the device source but already gone from /proc.
    store = Store()
    store.put(
        snapshot(
            "nvml",
            [
                info("0", G0, "00000000:17:00.0"),
                info("1", G1, "00000000:2A:00.0"),
                process("0", G0, 100),
                process("1", G1, 200),
                process("1", G1, 300),
                process("1", G1, 400),
            ],
        )
    )
    with FakeKubelet(str(tmp_path / "kubelet.sock")) as kubelet:
        kubelet.pods = [
            FakePod("ml", "train-0", [FakeContainer("trainer", {"nvidia.com/gpu": [G0]})])
        ]
        yield store, kubelet, str(tmp_path / "proc")


def make(store, socket, proc_path, enabled="auto", interval=30.0):
    cfg = WorkloadConfig(
        proc_path=proc_path,
        k8s=K8sEnrichConfig(enabled=enabled, socket=socket, interval=interval, timeout=0.5),
        slurm=SlurmEnrichConfig(),
    )
    source = WorkloadSource("workload", cfg)
    source.attach(store)
    return source


def by_metric(readings):
    out = {}
    for r in readings:
        out.setdefault(r.metric, {})[r.labels] = r.value
    return out


def test_attribution_pass(setup):
    store, kubelet, proc = setup
    source = make(store, kubelet.socket_path, proc)
    got = by_metric(asyncio.run(source.poll()))
    assert got["accel_device_workload_info"] == {("0", G0, "ml", "train-0", "trainer"): 1.0}
    assert got["accel_process_workload_info"] == {
        ("0", G0, "100", "ml", "train-0", "trainer", POD_UID, f"containerd://{CID}", "", ""): 1.0,
        ("1", G1, "200", "", "", "", "", "", "4242", "root"): 1.0,
    }
    assert got["accel_device_job_info"] == {("1", G1, "4242", "root", "gpu"): 1.0}
    assert got["accel_workload_attribution_errors_total"] == {
        ("bad_cgroup",): 1.0,
        ("pid_exited",): 1.0,
    }
    status = source.status()
    assert status["k8s"] == "ok" and status["k8s_assignments"] == 1
    assert status["processes_seen"] == 4 and status["pods_learned"] == 1


def test_kubelet_is_cached_between_refreshes(setup):
    store, kubelet, proc = setup
    source = make(store, kubelet.socket_path, proc, interval=60.0)

    async def twice():
        await source.poll()
        return await source.poll()

    got = by_metric(asyncio.run(twice()))
    assert kubelet.calls == 1
    # Errors accumulate: a counter, not a per-poll gauge.
    assert got["accel_workload_attribution_errors_total"][("pid_exited",)] == 2.0


def test_no_kubelet_on_an_auto_node_is_not_an_error(setup, tmp_path):
    store, _, proc = setup
    source = make(store, str(tmp_path / "absent.sock"), proc)
    got = by_metric(asyncio.run(source.poll()))
    assert "accel_device_workload_info" not in got
    # The cgroup still tells the pod UID; without the kubelet there are no names.
    assert ("0", G0, "100", "", "", "", POD_UID, f"containerd://{CID}", "", "") in got[
        "accel_process_workload_info"
    ]
    assert source.status()["k8s"].startswith("inactive")


def test_kubelet_required_but_missing_fails_with_partial_data(setup, tmp_path):
    store, _, proc = setup
    source = make(store, str(tmp_path / "absent.sock"), proc, enabled=True)
    with pytest.raises(SourceError) as info_:
        asyncio.run(source.poll())
    assert info_.value.reason == "kubelet_socket_missing"
    got = by_metric(info_.value.readings)
    assert got["accel_device_job_info"] == {("1", G1, "4242", "root", "gpu"): 1.0}
    assert got["accel_workload_attribution_errors_total"][("socket_missing",)] == 1.0


def test_slow_kubelet_keeps_the_last_answer(setup):
    store, kubelet, proc = setup
    source = make(store, kubelet.socket_path, proc, interval=1.0)

    async def run():
        await source.poll()
        kubelet.delay = 2.0
        await asyncio.sleep(1.05)  # the next refresh is due; the answer is kept 3 intervals
        try:
            await source.poll()
        except SourceError as exc:
            return exc
        return None

    exc = asyncio.run(run())
    assert exc is not None and exc.reason == "kubelet_timeout"
    got = by_metric(exc.readings)
    assert ("0", G0, "ml", "train-0", "trainer") in got["accel_device_workload_info"]
    assert got["accel_workload_attribution_errors_total"][("timeout",)] == 1.0


def test_without_device_data_nothing_is_exported(tmp_path):
    source = make(Store(), str(tmp_path / "absent.sock"), str(tmp_path))
    assert asyncio.run(source.poll()) == []


def test_hint_when_processes_are_counted_but_not_listed(tmp_path):
    from exporter.model import Reading

    store = Store()
    store.put(snapshot("nvml", [info("0", G0), Reading("accel_processes", ("0", G0), 2.0)]))
    source = make(store, str(tmp_path / "absent.sock"), str(tmp_path))
    asyncio.run(source.poll())
    assert "processes: true" in source.status()["hint"]


def no_listener(path: str) -> str:
    """A socket file nobody listens on (a kubelet that is not serving pod-resources)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.close()
    return path


def test_auto_with_a_socket_nobody_answers_is_inactive_not_down(setup, tmp_path):
    store, _, proc = setup
    source = make(store, no_listener(str(tmp_path / "dead.sock")), proc, interval=0.05)

    async def twice():
        first = await source.poll()
        await asyncio.sleep(0.1)
        return first, await source.poll()

    first, second = asyncio.run(twice())
    for readings in (first, second):
        assert "accel_device_workload_info" not in by_metric(readings)
    # Counted on every attempt, never a failed poll.
    assert by_metric(second)["accel_workload_attribution_errors_total"][("connect_failed",)] == 2
    state = source.status()["k8s"]
    assert state.startswith("inactive: connect_failed") and "workload.k8s.enabled" in state
    # Explicitly enabled, the same socket is a failure.
    with pytest.raises(SourceError) as failed:
        asyncio.run(make(store, str(tmp_path / "dead.sock"), proc, enabled=True).poll())
    assert failed.value.reason == "kubelet_connect_failed"


@pytest.mark.serial  # forks (run_as): never beside the parallel runner's threads
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_auto_with_a_root_only_socket_is_inactive_for_a_non_root_exporter(tmp_path):
    # The chart's default: a non-root pod and the kubelet's root-only socket.
    with tempfile.TemporaryDirectory(prefix="accel-kubelet-") as name:
        os.chmod(name, 0o755)
        with FakeKubelet(str(Path(name) / "kubelet.sock")) as kubelet:
            os.chmod(kubelet.socket_path, 0o600)
            store = Store()
            store.put(snapshot("nvml", [info("0", G0, "00000000:17:00.0")]))

            def poll() -> dict:
                source = make(store, kubelet.socket_path, name)
                got = by_metric(asyncio.run(source.poll()))
                errors = got["accel_workload_attribution_errors_total"]
                return {
                    "attributed": "accel_device_workload_info" in got,
                    "errors": {k[0]: v for k, v in errors.items()},
                    "k8s": source.status()["k8s"],
                }

            got = run_as(NOBODY, poll)
    assert got["attributed"] is False
    assert got["errors"] == {"permission_denied": 1.0}
    assert got["k8s"].startswith("inactive: permission_denied") and "root" in got["k8s"]
