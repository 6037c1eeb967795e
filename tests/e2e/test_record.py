"""``accel-exporter record`` as a user runs it: exit status, run log, phases, summary."""

from __future__ import annotations

import json
import sys

from tests.helpers.cli import record, run_log

SCRIPT = """
import json, os, sys, time
path = os.environ["ACCEL_EXPORTER_PHASE_FILE"]
def mark(**item):
    with open(path, "a") as fh:
        fh.write(json.dumps(item) + "\\n")
mark(phase="load")
time.sleep(0.6)
mark(phase="train", epoch=1)
mark(event="checkpoint_saved", step=10)
time.sleep(0.6)
print("trained", flush=True)
sys.exit(7)
"""


def test_exit_status_phases_and_log(tmp_path):
    out = tmp_path / "run"
    result = record(out, sys.executable, "-c", SCRIPT, args=("--interval", "200ms"))
    assert result.returncode == 7, result.stderr
    assert result.stdout == "trained\n"  # the command's own stdout, untouched
    log = run_log(out)
    kinds = [line["type"] for line in log]
    assert kinds[0] == "start" and kinds[-1] == "exit"
    assert kinds.count("sample") >= 4
    assert log[-1]["status"] == 7
    assert [(p["name"], p["data"]) for p in log if p["type"] == "phase"] == [
        ("load", {}),
        ("train", {"epoch": 1}),
    ]
    assert {"event": "checkpoint_saved", "data": {"step": 10}}.items() <= next(
        line for line in log if line.get("event") == "checkpoint_saved"
    ).items()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 7
    assert [p["name"] for p in summary["phases"]] == ["load", "train"]
    assert 1.0 < summary["wall_seconds"] < 60
    host = summary["host"]
    assert 0 <= host["cpu_user_ratio_mean"] <= 1 and 0 <= host["cpu_idle_ratio_mean"] <= 1
    assert summary["devices"] == {}  # no accelerator library on this machine


def test_killed_by_a_signal(tmp_path):
    out = tmp_path / "run"
    result = record(out, "sh", "-c", "kill -TERM $$")
    assert result.returncode == 128 + 15
    assert run_log(out)[-1]["signal"] == "SIGTERM"
    assert json.loads((out / "summary.json").read_text())["exit_status"] == 143


def test_command_that_cannot_start(tmp_path):
    result = record(tmp_path / "run", "/nonexistent/train.sh")
    assert result.returncode == 127
    assert "cannot run /nonexistent/train.sh" in result.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["exit_status"] == 127


def test_refuses_to_overwrite_and_needs_a_command(tmp_path):
    out = tmp_path / "run"
    assert record(out, "true").returncode == 0
    again = record(out, "true")
    assert again.returncode == 2 and "already holds a run" in again.stderr
    empty = record(tmp_path / "other")
    assert empty.returncode == 2 and "give the command" in empty.stderr
