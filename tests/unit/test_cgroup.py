"""Cgroup paths of every runtime and scheduler layout -> pod UID, container ID, Slurm job."""

from __future__ import annotations

import pytest

from exporter.enrich.cgroup import CgroupIdentity, CgroupParseError, parse_cgroup
from tests.helpers.fakeproc import (
    CID,
    POD_UID,
    k8s_v1_cgroupfs,
    k8s_v2_systemd,
    slurm_v1,
    slurm_v2,
)

UID_32 = "6c2d9b1e0f3a4b5c6d7e8f9012345678"  # static (mirror) pods have hash UIDs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (k8s_v2_systemd(), CgroupIdentity(POD_UID, f"containerd://{CID}")),
        (k8s_v2_systemd(runtime="crio"), CgroupIdentity(POD_UID, f"cri-o://{CID}")),
        (k8s_v2_systemd(runtime="docker"), CgroupIdentity(POD_UID, f"docker://{CID}")),
        # cgroupfs driver: no runtime prefix, so the bare id.
        (k8s_v1_cgroupfs(), CgroupIdentity(POD_UID, CID)),
        # CRI-O with the cgroupfs driver names the container crio-<id>, without .scope.
        (
            f"0::/kubepods/burstable/pod{POD_UID}/crio-{CID}\n",
            CgroupIdentity(POD_UID, f"cri-o://{CID}"),
        ),
        (
            f"4:memory:/kubepods/besteffort/pod{POD_UID}/crio-{CID}\n",
            CgroupIdentity(POD_UID, f"cri-o://{CID}"),
        ),
        # crun under CRI-O (cgroup v2) runs the process in a child of the scope.
        (
            f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/"
            f"crio-{CID}.scope/container\n",
            CgroupIdentity(POD_UID, f"cri-o://{CID}"),
        ),
        # Guaranteed QoS pods sit directly under kubepods.
        (
            f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n",
            CgroupIdentity(POD_UID, f"containerd://{CID}"),
        ),
        (
            f"0::/kubepods/pod{UID_32}/{CID}\n",
            CgroupIdentity(UID_32, CID),
        ),
        # Seen from a reader in its own cgroup namespace.
        (
            f"0::/../../kubepods-besteffort-pod{POD_UID.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n",
            CgroupIdentity(POD_UID, f"containerd://{CID}"),
        ),
        # conmon is not the container: only the pod is known.
        (
            f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/"
            f"crio-conmon-{CID}.scope\n",
            CgroupIdentity(POD_UID, ""),
        ),
        (f"0::/system.slice/docker-{CID}.scope\n", CgroupIdentity("", f"docker://{CID}")),
        (f"12:memory:/docker/{CID}\n", CgroupIdentity("", f"docker://{CID}")),
        (
            f"0::/user.slice/user-1000.slice/libpod-{CID}.scope\n",
            CgroupIdentity("", f"podman://{CID}"),
        ),
        (slurm_v2("777"), CgroupIdentity(job_id="777")),
        (slurm_v1("4242", 1001), CgroupIdentity(job_id="4242", slurm_uid="1001")),
        (
            "0::/system.slice/slurmstepd.scope/job_12/step_extern/user/task_special\n",
            CgroupIdentity(job_id="12"),
        ),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", CgroupIdentity()),
        ("0::/\n", CgroupIdentity()),
    ],
)
def test_layouts(text, expected):
    assert parse_cgroup(text) == expected


def test_slurm_inside_a_pod_gives_both():
    # Slurm run inside Kubernetes pods (Slinky): the job cgroup nests under the pod.
    text = (
        f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/"
        f"cri-containerd-{CID}.scope/system.slice/slurmstepd.scope/job_99/step_0/user/task_0\n"
    )
    found = parse_cgroup(text)
    assert (found.pod_uid, found.container_id, found.job_id) == (
        POD_UID,
        f"containerd://{CID}",
        "99",
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "garbage\n",
        "0::relative/path\n",
        f"{k8s_v2_systemd()}not a cgroup line\n",
        "x:memory:/kubepods\n",
        "\x00\x01\x02",
    ],
)
def test_malformed_files_are_rejected_whole(text):
    with pytest.raises(CgroupParseError):
        parse_cgroup(text)


def test_empty_identity_flag():
    assert CgroupIdentity().empty
    assert not CgroupIdentity(job_id="1").empty
