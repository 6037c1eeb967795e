"""The shipped diagnostic examples write what the diag source reads, where it reads it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from exporter.config.diag import DEFAULT_PATH
from exporter.diag import dcgm, files, formats

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "contrib" / "slurm" / "diag.sh"
JOB = REPO / "contrib" / "kubernetes" / "diag-preflight-job.yaml"
SAMPLE = REPO / "tests" / "fixtures" / "diag" / "dcgm-4.2.3-gb10-r1.json"


def fake_dcgmi(bin_dir: Path, exit_code: int = 226) -> Path:
    """A dcgmi that records its arguments and prints a real DCGM 4.2.3 document."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "dcgmi"
    path.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" > "{bin_dir}/args"\ncat "{SAMPLE}"\nexit {exit_code}\n'
    )
    path.chmod(0o755)
    return path


def run(directory: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "ACCEL_EXPORTER_DIAG_DIR": str(directory),
        **env,
    }
    return subprocess.run(
        ["sh", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_slurm_script_leaves_one_whole_result_the_parser_reads(tmp_path: Path) -> None:
    out, bin_dir = tmp_path / "diag", tmp_path / "bin"
    fake_dcgmi(bin_dir)
    done = run(
        out,
        bin_dir,
        SLURM_JOB_ID="4242",
        SLURM_JOB_GPUS="0,1",
        SLURM_SCRIPT_CONTEXT="prolog_slurmd",
    )
    assert done.returncode == 0, done.stderr
    (args,) = (bin_dir / "args").read_text().splitlines()
    assert args == "diag -r 1 -i 0,1 -j"
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 1 and re.fullmatch(r"prolog_slurmd-job4242-\d+\.json", written[0])
    assert files.wanted(written[0])
    run_ = formats.parse((out / written[0]).read_bytes())
    assert (run_.suite, run_.version) == ("dcgm", "4.2.3")


def test_the_slurm_script_tests_every_gpu_when_the_job_names_them_otherwise(tmp_path: Path) -> None:
    out, bin_dir = tmp_path / "diag", tmp_path / "bin"
    fake_dcgmi(bin_dir, exit_code=0)
    done = run(
        out,
        bin_dir,
        SLURM_JOB_ID="7",
        SLURM_JOB_GPUS="GPU-aaaa",
        ACCEL_EXPORTER_DIAG_LEVEL="3; rm -rf /",
    )
    assert done.returncode == 0
    assert (bin_dir / "args").read_text().strip() == "diag -r 1 -j"
    (name,) = [p.name for p in out.iterdir()]
    assert name.startswith("diag-job7-")


def test_the_slurm_script_never_fails_the_job(tmp_path: Path) -> None:
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()
    done = run(tmp_path / "diag", empty_bin, SLURM_JOB_ID="1")  # no dcgmi
    assert done.returncode == 0 and "not found" in done.stderr
    blocked = tmp_path / "file"
    blocked.write_text("")
    fake_dcgmi(tmp_path / "bin")
    done = run(blocked / "diag", tmp_path / "bin", SLURM_JOB_ID="1")  # cannot create
    assert done.returncode == 0 and "cannot create" in done.stderr


def test_the_slurm_script_removes_only_its_own_old_results(tmp_path: Path) -> None:
    out, bin_dir = tmp_path / "diag", tmp_path / "bin"
    out.mkdir()
    fake_dcgmi(bin_dir)
    old = out / "epilog_slurmd-job1-100.json"
    foreign = out / "agfhc-results.json"
    for path in (old, foreign):
        path.write_text("{}")
        os.utime(path, (0, 0))
    assert run(out, bin_dir, SLURM_JOB_ID="2").returncode == 0
    assert not old.exists() and foreign.exists()


def test_the_preflight_job_writes_where_the_exporter_reads() -> None:
    job = yaml.safe_load(JOB.read_text())
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    pod = job["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["hostPath"] == {"path": DEFAULT_PATH, "type": "DirectoryOrCreate"}
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    assert mount["name"] == volume["name"]
    script = container["args"][0]
    # Written under a temporary name the source skips, then renamed to a *.json it reads.
    assert f"{mount['mountPath']}/.preflight.json.tmp" in script
    assert f'"{mount["mountPath"]}/preflight-$(date +%s).json"' in script
    assert not files.wanted("preflight.json.tmp.12") and files.wanted("preflight-17.json")
    # The image's DCGM is a release the parser is pinned to.
    found = re.search(r":(\d+)\.(\d+)\.\d+", container["image"])
    assert found and (int(found[1]), int(found[2])) in dcgm.V4_RELEASES
    assert pod["tolerations"] == [{"operator": "Exists"}]
