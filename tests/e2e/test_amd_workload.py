"""Attribution on an AMD node: the fake libamd_smi, a kubelet naming GPUs by PCI bus ID."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from exporter.enrich.devices import normalise_pci
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.daemon import samples, value
from tests.helpers.fakeproc import CID, POD_UID, FakeProc, k8s_v2_systemd, slurm_v2


@pytest.fixture
def sock_dir():
    with tempfile.TemporaryDirectory(prefix="k8s-") as name:
        yield Path(name)


def test_amd_gpus_by_pci_bus_id(daemon_factory, amdsmi_fake, amdsmi_env, tmp_path, sock_dir):
    # The fake's GPU 0 runs pids 4242 and 4343; move 4343 to GPU 1.
    gpu0, gpu1 = amdsmi_fake.device(0), amdsmi_fake.device(1)
    gpu1.proc_pid[0], gpu1.proc_vram[0], gpu1.proc_count = 4343, 1 << 30, 1
    gpu0.proc_count = 1
    proc = FakeProc(tmp_path / "proc")
    proc.add(4242, cgroup=k8s_v2_systemd(POD_UID, CID, runtime="crio"))
    proc.add(4343, cgroup=slurm_v2("777"), environ={"SLURM_JOB_USER": "bob"})
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        d = daemon_factory(
            {
                "sources": {"amdsmi": {"enabled": True, "interval": "500ms", "processes": True}},
                "enrich": {
                    "interval": "500ms",
                    "proc_path": str(tmp_path / "proc"),
                    "k8s": {"socket": kubelet.socket_path, "interval": "500ms"},
                },
            },
            env=amdsmi_env,
        )
        d.wait_metric("accel_devices", 8, vendor="amd", timeout=40)
        infos = [
            dict(labels)
            for (name, labels), _ in samples(d.metrics()).items()
            if name == "accel_device_info"
        ]
        gpu0 = next(i for i in infos if i["device"] == "0")
        gpu1 = next(i for i in infos if i["device"] == "1")
        # The AMD device plugin names GPUs by PCI address, lower case, 4-digit domain.
        kubelet.pods = [
            FakePod(
                "rocm",
                "train",
                [FakeContainer("main", {"amd.com/gpu": [normalise_pci(gpu0["pci_bus_id"])]})],
            )
        ]
        d.wait_metric(
            "accel_process_workload_info",
            1,
            device="0",
            uuid=gpu0["uuid"],
            pid="4242",
            namespace="rocm",
            pod="train",
            container="main",
            pod_uid=POD_UID,
            container_id=f"cri-o://{CID}",
            job_id="",
            user="",
            timeout=30,
        )
        text = d.metrics()
        assert (
            value(
                text,
                "accel_device_workload_info",
                device="0",
                uuid=gpu0["uuid"],
                namespace="rocm",
                pod="train",
                container="main",
            )
            == 1
        )
        assert (
            value(
                text,
                "accel_device_job_info",
                device="1",
                uuid=gpu1["uuid"],
                job_id="777",
                user="bob",
                partition="",
            )
            == 1
        )
