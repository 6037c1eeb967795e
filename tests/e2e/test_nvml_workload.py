"""Attribution and checkpoint state end to end: fake libnvidia-ml + fake kubelet + fake /proc
+ fake libcuda, through the real daemon and the real binding packages."""

from __future__ import annotations

from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.fakes.nvml.control import MigInstance, Process
from tests.helpers.daemon import value
from tests.helpers.fakeproc import CID, POD_UID, POD_UID2, FakeProc, k8s_v2_systemd, slurm_v1
from tests.helpers.workload import QUIET, enrich, job_row, process_row, workload_row

CID_B = "b" * 64
TRAINER = {"namespace": "ml", "pod": "trainer", "container": "main"}
TRAINER_IDS = {"pod_uid": POD_UID, "container_id": f"containerd://{CID}"}
NOTEBOOK = {"namespace": "ml", "pod": "notebook", "container": "lab"}
NOTEBOOK_IDS = {"pod_uid": POD_UID2, "container_id": f"containerd://{CID_B}"}


def test_attribution_and_checkpoint_end_to_end(
    daemon_factory, fake_nvml, fake_libcuda_dir, tmp_path, sock_dir
):
    fake = fake_nvml(3)
    g0, g1, g2 = fake.uuid(0), fake.uuid(1), fake.uuid(2)
    # GPU 0: one training pod. GPU 1: time-sliced by two pods. GPU 2: a Slurm job,
    # plus a process that exits before the exporter reads it.
    fake.set_processes(0, [Process(1001, used_memory=20 << 30)])
    fake.set_processes(1, [Process(1101, used_memory=2 << 30), Process(1102, used_memory=3 << 30)])
    fake.set_processes(2, [Process(1201, used_memory=5 << 30), Process(1299)])
    proc = FakeProc(tmp_path / "proc")
    proc.add(1001, cgroup=k8s_v2_systemd(POD_UID, CID))
    proc.add(1101, cgroup=k8s_v2_systemd(POD_UID, CID))  # the trainer also on a GPU 1 replica
    proc.add(1102, cgroup=k8s_v2_systemd(POD_UID2, CID_B), environ={"HOSTNAME": "notebook"})
    proc.add(
        1201,
        cgroup=slurm_v1("31337", 0),
        environ={"SLURM_JOB_ID": "31337", "SLURM_JOB_USER": "alice", "SLURM_JOB_PARTITION": "a100"},
        maps="7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.570.86\n",
    )
    cuda_state = tmp_path / "cuda-state"
    cuda_state.write_text("driver_version 12080\npid 1001 0\npid 1201 2 4321\n")

    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        kubelet.pods = [
            FakePod("ml", "trainer", [FakeContainer("main", {"nvidia.com/gpu": [g0, g1 + "::0"]})]),
            FakePod("ml", "notebook", [FakeContainer("lab", {"nvidia.com/gpu": [g1 + "::1"]})]),
        ]
        env = fake.env()
        env["LD_LIBRARY_PATH"] = f"{env['LD_LIBRARY_PATH']}:{fake_libcuda_dir}"
        env["FAKE_CUDA_STATE"] = str(cuda_state)
        proc_path = str(tmp_path / "proc")
        checkpoint = {"enabled": True, "interval": "500ms", "proc_path": proc_path}
        d = daemon_factory(
            {
                "sources": {
                    **QUIET,
                    "nvml": {"enabled": True, "interval": "500ms", "processes": True},
                    "cuda_checkpoint": checkpoint,
                },
                "workload": enrich(proc_path, kubelet.socket_path),
            },
            env=env,
        )
        trainer_on_g1 = process_row("1", g1, 1101, **TRAINER, **TRAINER_IDS)
        notebook = process_row("1", g1, 1102, **NOTEBOOK, **NOTEBOOK_IDS)
        d.wait_metric("accel_process_workload_info", 1, **trainer_on_g1, timeout=40)
        d.wait_metric("accel_process_workload_info", 1, **notebook)
        text = d.metrics()
        row = process_row("0", g0, 1001, **TRAINER, **TRAINER_IDS)
        assert value(text, "accel_process_workload_info", **row) == 1
        for dev, uuid, who in (("0", g0, TRAINER), ("1", g1, TRAINER), ("1", g1, NOTEBOOK)):
            assert value(text, "accel_device_workload_info", **workload_row(dev, uuid, **who)) == 1
        job = job_row("2", g2, "31337", "alice", "a100")
        assert value(text, "accel_device_job_info", **job) == 1
        slurm = process_row("2", g2, 1201, job_id="31337", user="alice")
        assert value(text, "accel_process_workload_info", **slurm) == 1
        assert value(text, "accel_workload_attribution_errors_total", reason="pid_exited") >= 1
        # The devices' own series carry no workload labels (join metrics instead).
        assert value(text, "accel_process_memory_bytes", device="1", uuid=g1, pid="1102") == 3 << 30
        # Checkpoint state, with the uuid of the GPU each process was seen on.
        d.wait_metric("accel_process_checkpoint_state", 1, uuid=g0, pid="1001", state="running")
        d.wait_metric(
            "accel_process_checkpoint_state", 1, uuid=g2, pid="1201", state="checkpointed"
        )
        status = d.status()["sources"]
        assert status["cuda_checkpoint"]["restore_thread_ids"]["1201"] == 4321
        assert status["workload"]["k8s"] == "ok" and status["workload"]["processes_seen"] == 5

        # A process leaves the GPU: its row goes with the next pass.
        fake.set_processes(1, [Process(1101, used_memory=2 << 30)])
        d.wait_for(
            lambda: value(d.metrics(), "accel_process_workload_info", **notebook) is None,
            what="the notebook process row disappears",
        )


def test_mig_attribution(daemon_factory, fake_nvml, tmp_path, sock_dir):
    fake = fake_nvml(1)
    gib = 1 << 30
    small = "MIG-66666666-7777-8888-9999-000000000000"
    fake.set_mig(
        0,
        [
            MigInstance(1, 0, 10 * gib, 1 * gib, uuid="MIG-11111111-2222-3333-4444-555555555555"),
            MigInstance(2, 0, 10 * gib, 2 * gib, uuid=small),
        ],
    )
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        mig_resource = {"nvidia.com/mig-1g.10gb": [small]}
        kubelet.pods = [FakePod("ml", "small", [FakeContainer("c", mig_resource)])]
        nvml = {"enabled": True, "interval": "500ms", "slow_interval": "1s"}
        d = daemon_factory(
            {
                "sources": {**QUIET, "nvml": nvml},
                "workload": enrich(str(tmp_path), kubelet.socket_path),
            },
            env=fake.env(),
        )
        who = {"namespace": "ml", "pod": "small", "container": "c"}
        mig = {"gpu_instance": "2", "compute_instance": "0", **who}
        d.wait_metric(
            "accel_mig_workload_info", 1, device="0", uuid=fake.uuid(0), **mig, timeout=40
        )
        row = workload_row("0", fake.uuid(0), **who)
        assert value(d.metrics(), "accel_device_workload_info", **row) == 1
