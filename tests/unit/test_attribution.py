"""The attribution join: kubelet assignments x process cgroups x Slurm jobs."""

from __future__ import annotations

import pytest

from exporter.enrich.attribution import Inputs, PodMemory, attribute
from exporter.enrich.cgroup import CgroupIdentity
from exporter.enrich.devices import DeviceIndex, DeviceRef, MigRef
from exporter.enrich.dra import DraDevice, DraIndex, SliceDevice
from exporter.enrich.errors import AttributionError
from exporter.enrich.pod_resources import Assignment
from exporter.enrich.procfs import ProcessFacts
from exporter.enrich.slurm_files import JobFile

G0 = DeviceRef("0", "GPU-0000", "nvidia", "0000:17:00.0")
G1 = DeviceRef("1", "GPU-1111", "nvidia", "0000:2a:00.0")
G2 = DeviceRef("2", "GPU-2222", "nvidia", "0000:3b:00.0")
UID_A, UID_B, UID_C = "uid-a", "uid-b", "uid-c"


def pod_proc(pid, uid, cid="", **env):
    return ProcessFacts(pid, CgroupIdentity(pod_uid=uid, container_id=cid), 0, env)


def rows(result, metric):
    return sorted(r.labels for r in result.readings if r.metric == metric)


def process_rows(result):
    # (pid, namespace, pod, container, pod_uid, container_id, job_id, user)
    return {
        r.labels[2]: r.labels[3:]
        for r in result.readings
        if r.metric == "accel_process_workload_info"
    }


def test_exclusive_gpus():
    index = DeviceIndex([G0, G1, G2], [(G0.uuid, 10), (G1.uuid, 20), (G1.uuid, 21)])
    assignments = [
        Assignment("ml", "train-0", "trainer", "nvidia.com/gpu", G0.uuid),
        Assignment("ml", "infer-0", "server", "nvidia.com/gpu", G1.uuid),
        Assignment("ml", "gone", "x", "nvidia.com/gpu", "GPU-not-here"),
    ]
    facts = {
        10: pod_proc(10, UID_A, "containerd://a1"),
        20: pod_proc(20, UID_B, "containerd://b1"),
        21: pod_proc(21, UID_B, "containerd://b1"),
    }
    result = attribute(Inputs(index, facts, assignments), PodMemory())
    assert rows(result, "accel_device_workload_info") == [
        ("0", G0.uuid, "ml", "train-0", "trainer"),
        ("1", G1.uuid, "ml", "infer-0", "server"),
    ]
    procs = process_rows(result)
    assert procs["10"] == ("ml", "train-0", "trainer", UID_A, "containerd://a1", "", "")
    assert procs["21"] == ("ml", "infer-0", "server", UID_B, "containerd://b1", "", "")
    assert dict(result.errors) == {"unknown_device": 1}


def test_shared_gpu_learns_from_exclusive_devices_and_hostname():
    # Pod A holds G0 alone and a replica of G1; pod B holds only a replica of G1.
    index = DeviceIndex([G0, G1], [(G0.uuid, 10), (G1.uuid, 11), (G1.uuid, 30)])
    assignments = [
        Assignment("ns", "a", "main", "nvidia.com/gpu", G0.uuid),
        Assignment("ns", "a", "main", "nvidia.com/gpu", G1.uuid + "::0"),
        Assignment("ns", "b", "main", "nvidia.com/gpu", G1.uuid + "::1"),
    ]
    facts = {
        10: pod_proc(10, UID_A, "c-a"),
        11: pod_proc(11, UID_A, "c-a"),
        30: pod_proc(30, UID_B, "c-b", HOSTNAME="b"),
    }
    memory = PodMemory()
    result = attribute(Inputs(index, facts, assignments), memory)
    procs = process_rows(result)
    assert procs["11"][:3] == ("ns", "a", "main")  # learned from G0
    assert procs["30"][:3] == ("ns", "b", "main")  # HOSTNAME names one of G1's pods
    assert not result.errors
    assert memory.pods == {UID_A: ("ns", "a"), UID_B: ("ns", "b")}
    assert rows(result, "accel_device_workload_info") == [
        ("0", G0.uuid, "ns", "a", "main"),
        ("1", G1.uuid, "ns", "a", "main"),
        ("1", G1.uuid, "ns", "b", "main"),
    ]


def test_unresolvable_shared_gpu_keeps_uid_and_counts():
    index = DeviceIndex([G1], [(G1.uuid, 40), (G1.uuid, 41)])
    assignments = [
        Assignment("ns", "a", "main", "nvidia.com/gpu", G1.uuid + "::0"),
        Assignment("ns", "b", "main", "nvidia.com/gpu", G1.uuid + "::1"),
    ]
    facts = {
        40: ProcessFacts(40, CgroupIdentity(UID_A, "c-a"), 0, {}, "permission_denied"),
        41: pod_proc(41, UID_B, "c-b", HOSTNAME="custom-hostname"),
    }
    result = attribute(Inputs(index, facts, assignments), PodMemory())
    procs = process_rows(result)
    assert procs["40"] == ("", "", "", UID_A, "c-a", "", "")
    assert procs["41"] == ("", "", "", UID_B, "c-b", "", "")
    assert result.errors == {"unresolved_pod": 2, "environ_permission_denied": 1}


def test_foreign_process_on_an_exclusive_gpu_teaches_nothing():
    # A pod that did not request the GPU but sees it (NVIDIA_VISIBLE_DEVICES=all).
    index = DeviceIndex([G0], [(G0.uuid, 10), (G0.uuid, 66)])
    assignments = [Assignment("ns", "a", "main", "nvidia.com/gpu", G0.uuid)]
    facts = {10: pod_proc(10, UID_A, "c-a", HOSTNAME="a"), 66: pod_proc(66, UID_C, "c-c")}
    result = attribute(Inputs(index, facts, assignments), PodMemory())
    procs = process_rows(result)
    assert procs["10"][:3] == ("ns", "a", "main")  # by HOSTNAME, not by exclusivity
    assert procs["66"][:3] == ("", "", "")
    assert result.errors == {"unresolved_pod": 1}


def test_host_processes_and_failures():
    index = DeviceIndex([G0], [(G0.uuid, 1), (G0.uuid, 2), (G0.uuid, 3)])
    facts = {
        1: ProcessFacts(1, CgroupIdentity(), 0, {}),
        2: AttributionError("pid_exited"),
        3: AttributionError("bad_cgroup"),
    }
    result = attribute(Inputs(index, facts, []), PodMemory())
    assert process_rows(result) == {}
    assert result.errors == {"pid_exited": 1, "bad_cgroup": 1}


def test_memory_forgets_pods_without_processes():
    memory = PodMemory({UID_A: ("ns", "a"), "old": ("ns", "old")}, {"c-a": "main", "c-old": "x"})
    index = DeviceIndex([G0], [(G0.uuid, 10)])
    attribute(Inputs(index, {10: pod_proc(10, UID_A, "c-a")}, None), memory)
    assert memory.pods == {UID_A: ("ns", "a")} and memory.containers == {"c-a": "main"}


def test_slurm_from_cgroup_and_environment():
    index = DeviceIndex([G0, G1, G2], [(G0.uuid, 1), (G0.uuid, 2), (G1.uuid, 3), (G2.uuid, 4)])
    facts = {
        # cgroup job, environment readable
        1: ProcessFacts(
            1,
            CgroupIdentity(job_id="100"),
            1000,
            {"SLURM_JOB_ID": "100", "SLURM_JOB_USER": "alice", "SLURM_JOB_PARTITION": "gpu"},
        ),
        # same job, environment unreadable: user from the cgroup's uid_<n>
        2: ProcessFacts(2, CgroupIdentity(job_id="100", slurm_uid="0"), 0, {}, "permission_denied"),
        # no job cgroup (proctrack/linuxproc): the environment alone
        3: ProcessFacts(3, CgroupIdentity(), 0, {"SLURM_JOB_ID": "200", "SLURM_JOB_USER": "bob"}),
        # a job cgroup, no environment: user from the process uid
        4: ProcessFacts(4, CgroupIdentity(job_id="300"), 0, {}, "permission_denied"),
    }
    result = attribute(Inputs(index, facts, None), PodMemory())
    assert rows(result, "accel_device_job_info") == [
        ("0", G0.uuid, "100", "alice", "gpu"),
        ("1", G1.uuid, "200", "bob", ""),
        ("2", G2.uuid, "300", "root", ""),
    ]
    procs = process_rows(result)
    assert procs["1"][-2:] == ("100", "alice")
    assert procs["2"][-2:] == ("100", "root")
    assert result.errors == {"environ_permission_denied": 2}


def test_slurm_files_mode():
    index = DeviceIndex([G0, G1], [])
    jobs = [
        JobFile("7", "carol", "long", ("0", G1.uuid)),
        JobFile("8", "dave", "short", ("5",)),
    ]
    result = attribute(Inputs(index, {}, None, jobs), PodMemory())
    assert rows(result, "accel_device_job_info") == [
        ("0", G0.uuid, "7", "carol", "long"),
        ("1", G1.uuid, "7", "carol", "long"),
    ]
    assert result.errors == {"unknown_device": 1}


def test_switches():
    index = DeviceIndex([G0], [(G0.uuid, 1)])
    facts = {1: ProcessFacts(1, CgroupIdentity(UID_A, "c", job_id="5"), 0, {})}
    assignments = [Assignment("ns", "a", "main", "nvidia.com/gpu", G0.uuid)]
    no_k8s = attribute(Inputs(index, facts, assignments, k8s=False), PodMemory())
    assert rows(no_k8s, "accel_device_workload_info") == []
    assert process_rows(no_k8s)["1"] == ("", "", "", "", "", "5", "root")
    no_slurm = attribute(Inputs(index, facts, assignments, slurm=False), PodMemory())
    assert rows(no_slurm, "accel_device_job_info") == []
    assert process_rows(no_slurm)["1"] == ("ns", "a", "main", UID_A, "c", "", "")


@pytest.mark.parametrize(
    "ids",
    [("MIG-a", "MIG-b"), ("nvidia0/gi1", "nvidia0/gi2/vgpu0")],
    ids=["mig-uuids", "gke-gpu-instances"],
)
def test_mig_assignments(ids):
    index = DeviceIndex(
        [G0],
        [(G0.uuid, 1), (G0.uuid, 2)],
        [MigRef("MIG-a", G0.uuid, "1", "0"), MigRef("MIG-b", G0.uuid, "2", "0")],
    )
    assignments = [
        Assignment("ns", "p1", "c", "nvidia.com/mig-1g.10gb", ids[0]),
        Assignment("ns", "p2", "c", "nvidia.com/mig-1g.10gb", ids[1]),
    ]
    result = attribute(Inputs(index, {}, assignments), PodMemory())
    assert rows(result, "accel_mig_workload_info") == [
        ("0", G0.uuid, "1", "0", "ns", "p1", "c"),
        ("0", G0.uuid, "2", "0", "ns", "p2", "c"),
    ]
    assert rows(result, "accel_device_workload_info") == [
        ("0", G0.uuid, "ns", "p1", "c"),
        ("0", G0.uuid, "ns", "p2", "c"),
    ]
    assert not result.errors


def test_gke_time_sharing_shares_name_the_whole_gpu():
    index = DeviceIndex([G0, G1])
    assignments = [
        Assignment("ns", "p3", "c", "nvidia.com/gpu", "nvidia1/vgpu3"),
        Assignment("ns", "p4", "c", "nvidia.com/gpu", "nvidia1/vgpu4"),
    ]
    result = attribute(Inputs(index, {}, assignments), PodMemory())
    assert rows(result, "accel_mig_workload_info") == []
    assert rows(result, "accel_device_workload_info") == [
        ("1", G1.uuid, "ns", "p3", "c"),
        ("1", G1.uuid, "ns", "p4", "c"),
    ]
    assert not result.errors


# -- DRA ---------------------------------------------------------------------------------


MIG_UUID = "MIG-0000-aaaa"


def dra_claim(pod, device, driver="gpu.nvidia.com", claim="c"):
    ref = DraDevice(driver, "node-1", device)
    return Assignment("ml", pod, "main", driver, device, "ml", claim, ref)


def dra_index(*devices):
    return DraIndex(devices)


def test_dra_claims_follow_the_slices_to_the_gpu_and_the_mig_device():
    index = DeviceIndex([G0, G1], migs=[MigRef(MIG_UUID, G1.uuid, "3", "0")])
    dra = dra_index(
        SliceDevice(DraDevice("gpu.nvidia.com", "node-1", "gpu-0"), uuid=G0.uuid),
        SliceDevice(
            DraDevice("gpu.nvidia.com", "node-1", "gpu-1-mig"),
            uuid=MIG_UUID,
            parent_uuid=G1.uuid,
        ),
        SliceDevice(DraDevice("gpu.amd.com", "node-1", "gpu-0-128"), pci_bus_id="0000:2a:00.0"),
    )
    result = attribute(
        Inputs(
            index=index,
            facts={},
            assignments=[dra_claim("full", "gpu-0"), dra_claim("mig", "gpu-1-mig", claim="m")],
            dra=dra,
        ),
        PodMemory(),
    )
    assert rows(result, "accel_device_workload_info") == [
        ("0", G0.uuid, "ml", "full", "main"),
        ("1", G1.uuid, "ml", "mig", "main"),
    ]
    assert rows(result, "accel_mig_workload_info") == [
        ("1", G1.uuid, "3", "0", "ml", "mig", "main")
    ]
    assert rows(result, "accel_device_claim_info") == [
        ("0", G0.uuid, "ml", "full", "main", "ml", "c", "gpu.nvidia.com", "node-1", "gpu-0"),
        ("1", G1.uuid, "ml", "mig", "main", "ml", "m", "gpu.nvidia.com", "node-1", "gpu-1-mig"),
    ]
    assert not result.errors


def test_dra_claims_that_cannot_be_followed_are_counted_never_guessed():
    index = DeviceIndex([G0, G1])
    dra = dra_index(
        SliceDevice(DraDevice("gpu.nvidia.com", "node-1", "gpu-0"), uuid=G0.uuid),
        SliceDevice(DraDevice("gpu.nvidia.com", "node-1", "gpu-9")),  # no identity attribute
        SliceDevice(DraDevice("nic.example.com", "node-1", "vf-0"), pci_bus_id="0000:99:00.2"),
    )
    claims = [
        dra_claim("unknown-driver", "dev-0", driver="gpu.example.com"),
        dra_claim("unknown-device", "gpu-7"),
        dra_claim("no-identity", "gpu-9"),
        dra_claim("a-nic", "vf-0", driver="nic.example.com"),  # not an accelerator: ignored
        Assignment("ml", "plugin", "main", "nvidia.com/gpu", G1.uuid),
    ]
    result = attribute(Inputs(index=index, facts={}, assignments=claims, dra=dra), PodMemory())
    assert rows(result, "accel_device_workload_info") == [("1", G1.uuid, "ml", "plugin", "main")]
    assert result.errors == {
        "dra_unknown_driver": 1,
        "dra_unknown_device": 1,
        "dra_no_identity": 1,
    }
    assert result.dra_missing == {
        DraDevice("gpu.example.com", "node-1", "dev-0"),
        DraDevice("gpu.nvidia.com", "node-1", "gpu-7"),
    }
    # Slices not listed (yet): every claim is counted, the device plugin's still attributed.
    unlisted = attribute(Inputs(index=index, facts={}, assignments=claims), PodMemory())
    assert unlisted.errors == {"dra_slices_unavailable": 4}
    assert rows(unlisted, "accel_device_workload_info") == [("1", G1.uuid, "ml", "plugin", "main")]


# -- shared GPUs: per-pod memory and utilization -------------------------------------------


def test_two_pods_on_one_gpu_get_their_own_memory_and_utilization():
    # Time-slicing: two pods hold replicas of one GPU; each pod's processes are named by
    # their cgroup's pod UID and HOSTNAME. A third process is on the GPU outside any pod.
    index = DeviceIndex([G0], [(G0.uuid, 10), (G0.uuid, 11), (G0.uuid, 20), (G0.uuid, 30)])
    assignments = [
        Assignment("ml", "a", "main", "nvidia.com/gpu", f"{G0.uuid}::0"),
        Assignment("ml", "b", "main", "nvidia.com/gpu", f"{G0.uuid}::1"),
    ]
    facts = {
        10: pod_proc(10, UID_A, HOSTNAME="a"),
        11: pod_proc(11, UID_A, HOSTNAME="a"),
        20: pod_proc(20, UID_B, HOSTNAME="b"),
        30: ProcessFacts(30, CgroupIdentity(), 0, {}),
    }
    used = {10: 3e9, 11: 1e9, 20: 2e9, 30: 5e8}
    busy = {10: 0.25, 11: 0.125, 20: 0.5}
    result = attribute(
        Inputs(
            index=index,
            facts=facts,
            assignments=assignments,
            process_memory={(G0.uuid, pid): v for pid, v in used.items()},
            process_utilization={(G0.uuid, pid): v for pid, v in busy.items()},
        ),
        PodMemory(),
    )
    memory = {
        r.labels: r.value for r in result.readings if r.metric == "accel_workload_memory_used_bytes"
    }
    assert memory == {
        ("0", G0.uuid, "ml", "a", "main"): 4e9,
        ("0", G0.uuid, "ml", "b", "main"): 2e9,
    }
    # The pods' rows add up to their processes' total; the host process is in no pod.
    assert sum(memory.values()) == sum(used.values()) - used[30]
    utilization = {
        r.labels: r.value for r in result.readings if r.metric == "accel_workload_utilization_ratio"
    }
    assert utilization == {
        ("0", G0.uuid, "ml", "a", "main"): 0.375,
        ("0", G0.uuid, "ml", "b", "main"): 0.5,
    }
