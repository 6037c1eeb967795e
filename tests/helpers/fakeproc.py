"""A fake /proc tree: per-pid cgroup, environ, status and maps files under a directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# Real-world cgroup files (ids shortened only where the format allows any length).
CID = "4f1c9d0e2b7a" + "0" * 52  # a 64-hex container id
CID2 = "9a8b7c6d5e4f" + "1" * 52
POD_UID = "1f2d3c4b-5a6e-7f80-9a1b-2c3d4e5f6a7b"
POD_UID2 = "aaaabbbb-cccc-dddd-eeee-ffff00001111"


def k8s_v2_systemd(uid: str = POD_UID, cid: str = CID, runtime: str = "cri-containerd") -> str:
    slice_uid = uid.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{slice_uid}.slice/{runtime}-{cid}.scope\n"
    )


def k8s_v1_cgroupfs(uid: str = POD_UID, cid: str = CID) -> str:
    lines = []
    for n, ctl in enumerate(["cpuset", "cpu,cpuacct", "memory", "devices", "pids"], start=2):
        lines.append(f"{n}:{ctl}:/kubepods/besteffort/pod{uid}/{cid}")
    lines.append("1:name=systemd:/kubepods/besteffort/pod" + uid + "/" + cid)
    return "\n".join(reversed(lines)) + "\n"


def slurm_v2(job: str = "4242", step: str = "0") -> str:
    return f"0::/system.slice/slurmstepd.scope/job_{job}/step_{step}/user/task_0\n"


def slurm_v1(job: str = "4242", uid: int = 1000) -> str:
    return (
        f"7:devices:/slurm/uid_{uid}/job_{job}/step_0/task_0\n"
        f"4:memory:/slurm/uid_{uid}/job_{job}/step_0/task_0\n"
        "1:name=systemd:/system.slice/slurmd.service\n"
    )


class FakeProc:
    """Writes /proc-like files for chosen pids under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(
        self,
        pid: int,
        cgroup: str = "0::/user.slice/user-1000.slice/session-1.scope\n",
        environ: Mapping[str, str] | None = None,
        uid: int = 1000,
        tgid: int | None = None,
        maps: str = "",
        starttime: int = 1000,
    ) -> Path:
        d = self.root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(cgroup)
        env = environ or {}
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
        (d / "status").write_text(
            f"Name:\tpython3\nTgid:\t{tgid if tgid is not None else pid}\nPid:\t{pid}\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
        (d / "maps").write_text(maps)
        # Fields 3..52 of a real stat line; field 22 is the start time (clock ticks).
        rest = ["S", "1", str(pid), str(pid), "0", "-1", "4194304"] + ["0"] * 12 + [str(starttime)]
        (d / "stat").write_text(f"{pid} (python3 (x)) " + " ".join(rest + ["0"] * 30) + "\n")
        return d

    def remove(self, pid: int) -> None:
        d = self.root / str(pid)
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
