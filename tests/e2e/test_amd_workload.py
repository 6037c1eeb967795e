"""Attribution on an AMD node: the fake libamd_smi, a kubelet naming GPUs by PCI bus ID."""

from __future__ import annotations

from exporter.enrich.devices import normalise_pci
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.daemon import samples, value
from tests.helpers.fakeproc import CID, POD_UID, FakeProc, k8s_v2_systemd, slurm_v2
from tests.helpers.workload import enrich, job_row, process_row, workload_row


def test_amd_gpus_by_pci_bus_id(daemon_factory, amdsmi_fake, amdsmi_env, tmp_path, sock_dir):
    # The fake's GPU 0 runs pids 4242 and 4343; move 4343 to GPU 1.
    gpu0, gpu1 = amdsmi_fake.device(0), amdsmi_fake.device(1)
    gpu1.proc_pid[0], gpu1.proc_vram[0], gpu1.proc_count = 4343, 1 << 30, 1
    gpu0.proc_count = 1
    proc = FakeProc(tmp_path / "proc")
    proc.add(4242, cgroup=k8s_v2_systemd(POD_UID, CID, runtime="crio"))
    proc.add(4343, cgroup=slurm_v2("777"), environ={"SLURM_JOB_USER": "bob"})
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        amd = {"enabled": True, "interval": "500ms", "processes": True}
        quiet = {name: {"enabled": False} for name in ("nvml", "ccl_ras", "ccl_inspector")}
        d = daemon_factory(
            {
                "sources": {**quiet, "amdsmi": amd},
                "workload": enrich(str(tmp_path / "proc"), kubelet.socket_path, interval="500ms"),
            },
            env=amdsmi_env,
        )
        d.wait_metric("accel_devices", 8, vendor="amd", timeout=40)
        infos = {
            dict(labels)["device"]: dict(labels)
            for (name, labels), _ in samples(d.metrics()).items()
            if name == "accel_device_info"
        }
        u0, u1 = infos["0"]["uuid"], infos["1"]["uuid"]
        # The AMD device plugin names GPUs by PCI address, lower case, 4-digit domain.
        bus_id = normalise_pci(infos["0"]["pci_bus_id"])
        kubelet.pods = [
            FakePod("rocm", "train", [FakeContainer("main", {"amd.com/gpu": [bus_id]})])
        ]
        who = {"namespace": "rocm", "pod": "train", "container": "main"}
        ids = {"pod_uid": POD_UID, "container_id": f"cri-o://{CID}"}
        row = process_row("0", u0, 4242, **who, **ids)
        d.wait_metric("accel_process_workload_info", 1, **row, timeout=30)
        text = d.metrics()
        assert value(text, "accel_device_workload_info", **workload_row("0", u0, **who)) == 1
        assert value(text, "accel_device_job_info", **job_row("1", u1, "777", "bob", "")) == 1
