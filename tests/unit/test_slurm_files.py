"""Slurm prolog/epilog file mode: the shipped scripts and the parser agree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from exporter.enrich.errors import AttributionError
from exporter.enrich.slurm_files import JobFile, parse_job_file, read_job_files

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "slurm"


def run_script(name: str, directory: Path, **env: str) -> None:
    full = {"PATH": os.environ["PATH"], "ACCEL_EXPORTER_SLURM_DIR": str(directory), **env}
    subprocess.run(["sh", str(CONTRIB / name)], env=full, check=True, timeout=30)


def test_prolog_writes_and_epilog_removes(tmp_path):
    run_script(
        "prolog.sh",
        tmp_path,
        SLURM_JOB_ID="4242",
        SLURM_JOB_USER="alice",
        SLURM_JOB_PARTITION="gpu",
        SLURM_JOB_GPUS="0,1",
    )
    run_script(
        "prolog.sh",
        tmp_path,
        SLURM_JOB_ID="4243",
        SLURM_JOB_USER='bob "the builder"\\',
        SLURM_JOB_PARTITION="debug",
        CUDA_VISIBLE_DEVICES="GPU-aaaa",
    )
    jobs, problems = read_job_files(str(tmp_path))
    assert problems == []
    assert jobs == [
        JobFile("4242", "alice", "gpu", ("0", "1")),
        JobFile("4243", 'bob "the builder"\\', "debug", ("GPU-aaaa",)),
    ]
    run_script("epilog.sh", tmp_path, SLURM_JOB_ID="4242")
    jobs, _ = read_job_files(str(tmp_path))
    assert [j.job_id for j in jobs] == ["4243"]
    assert not list(tmp_path.glob("*.tmp*"))


def test_missing_directory_is_no_jobs(tmp_path):
    assert read_job_files(str(tmp_path / "absent")) == ([], [])


def test_bad_files_are_reported_and_skipped(tmp_path):
    (tmp_path / "1.json").write_text('{"job_id": "1", "gpus": ["0", 1]}')
    (tmp_path / "2.json").write_text("{not json")
    (tmp_path / "3.json").write_text('{"job_id": ""}')
    (tmp_path / "4.json").write_text("x" * 70000)
    (tmp_path / "5.json.tmp").write_text("ignored, being written")
    jobs, problems = read_job_files(str(tmp_path))
    assert jobs == [JobFile("1", "", "", ("0", "1"))]
    assert sorted(p.reason for p in problems) == ["bad_job_file"] * 3


@pytest.mark.parametrize(
    "text",
    ["[]", '{"job_id": 1.5}', '{"job_id": "1", "gpus": {"a": 1}}', '{"job_id": "1", "user": 3}'],
)
def test_parse_rejects(text):
    with pytest.raises(AttributionError) as info:
        parse_job_file(text, "x.json")
    assert info.value.reason == "bad_job_file"


def test_integer_job_id_accepted():
    assert parse_job_file('{"job_id": 17, "gpus": "2"}', "17.json").job_id == "17"
