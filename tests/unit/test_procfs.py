"""Reading per-process facts from a fake /proc tree, and every way it can fail."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from exporter.enrich.errors import AttributionError
from exporter.enrich.procfs import ProcReader, parse_environ, user_name
from tests.helpers.fakeproc import POD_UID, FakeProc, k8s_v2_systemd, slurm_v2
from tests.helpers.privileges import NOBODY, run_as

REPO = Path(__file__).resolve().parents[2]


def always(_identity):
    return True


def test_facts(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(
        100,
        cgroup=slurm_v2("55"),
        environ={"SLURM_JOB_ID": "55", "SLURM_JOB_USER": "alice", "PATH": "/bin", "X": "a=b"},
        uid=1234,
    )
    facts = ProcReader(str(tmp_path)).facts(100, always)
    assert facts.cgroup.job_id == "55"
    assert dict(facts.env) == {"SLURM_JOB_ID": "55", "SLURM_JOB_USER": "alice"}
    assert facts.uid == 1234
    assert facts.env_error == ""


def test_environ_only_when_wanted(tmp_path):
    FakeProc(tmp_path).add(5, cgroup=k8s_v2_systemd(), environ={"HOSTNAME": "p"})
    seen = []

    def wanted(identity):
        seen.append(identity.pod_uid)
        return False

    facts = ProcReader(str(tmp_path)).facts(5, wanted)
    assert seen == [POD_UID] and dict(facts.env) == {}


def test_pid_gone(tmp_path):
    with pytest.raises(AttributionError) as info:
        ProcReader(str(tmp_path)).facts(4242, always)
    assert info.value.reason == "pid_exited"


def test_garbage_cgroup(tmp_path):
    FakeProc(tmp_path).add(7, cgroup="this is not\na cgroup file\n")
    with pytest.raises(AttributionError) as info:
        ProcReader(str(tmp_path)).facts(7, always)
    assert info.value.reason == "bad_cgroup"


def test_missing_environ_keeps_cgroup_facts(tmp_path):
    d = FakeProc(tmp_path).add(8, cgroup=slurm_v2("9"))
    (d / "environ").unlink()
    facts = ProcReader(str(tmp_path)).facts(8, always)
    assert facts.cgroup.job_id == "9" and facts.env_error == "pid_exited"


def test_tgid_and_maps(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(20, maps="7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.570.86\n")
    proc.add(21, tgid=20)
    reader = ProcReader(str(tmp_path))
    assert reader.is_process(20) and not reader.is_process(21) and not reader.is_process(99)
    assert reader.maps_mention(20, b"libcuda.so")
    assert not reader.maps_mention(21, b"libcuda.so")
    assert sorted(reader.pids()) == [20, 21]


def test_maps_match_across_chunk_boundary(tmp_path):
    filler = "a" * (65536 - 5)
    FakeProc(tmp_path).add(30, maps=filler + "/libcuda.so.1\n")
    assert ProcReader(str(tmp_path)).maps_mention(30, b"libcuda.so")


def test_parse_environ_tolerates_junk():
    data = b"SLURM_JOB_ID=1\0\xff\xfe=bad\0noequals\0HOSTNAME=\xc3\xa9\0"
    assert parse_environ(data) == {"SLURM_JOB_ID": "1", "HOSTNAME": "\u00e9"}


def test_user_name():
    assert user_name(0) == "root"
    assert user_name(4000000) == "4000000"
    assert user_name(None) == ""


def read_as_nobody(root: Path) -> dict[str, dict[str, str]]:
    def read() -> dict[str, dict[str, str]]:
        reader = ProcReader(str(root))
        out: dict[str, dict[str, str]] = {}
        for p in (40, 41):
            try:
                f = reader.facts(p, always)
                out[str(p)] = {"job": f.cgroup.job_id, "env_error": f.env_error}
            except AttributionError as exc:
                out[str(p)] = {"error": exc.reason}
        return out

    return dict(run_as(NOBODY, read))


@pytest.mark.serial  # forks (run_as): never beside the parallel runner's threads
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_permission_denied_as_an_unprivileged_reader():
    # Root reads everything, so the reader runs as nobody over root-only files,
    # the way an unprivileged exporter meets other users' /proc entries. pytest's
    # tmp_path is under a root-only directory, hence a directory of our own.
    with tempfile.TemporaryDirectory(prefix="accel-proc-perm-") as name:
        check_permissions(Path(name))


def check_permissions(root: Path) -> None:
    os.chmod(root, 0o755)
    proc = FakeProc(root / "proc")
    os.chmod(root / "proc", 0o755)
    for pid in (40, 41):
        d = proc.add(pid, cgroup=slurm_v2(str(pid)), environ={"SLURM_JOB_USER": "x"})
        os.chmod(d, 0o755)
        for name in ("cgroup", "status", "maps"):
            os.chmod(d / name, 0o644)
        os.chmod(d / "environ", 0o600)  # as the kernel does for other users' environ
    os.chmod(root / "proc" / "41" / "cgroup", 0o600)
    out = read_as_nobody(root / "proc")
    assert out["40"] == {"job": "40", "env_error": "permission_denied"}
    assert out["41"] == {"error": "permission_denied"}
