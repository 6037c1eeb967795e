"""``accel-exporter record`` as a user runs it: exit status, run log, phases, summary."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from tests.helpers.cli import cli_command, cli_env, record, run_log
from tests.helpers.wait import eventually

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


def test_a_command_shorter_than_the_interval_still_gets_figures(tmp_path):
    # `record --out DIR -- true` at the default 1 s: no sample completes while it runs.
    out = tmp_path / "run"
    result = record(out, "true")
    assert result.returncode == 0, result.stderr
    samples = [line for line in run_log(out) if line["type"] == "sample"]
    host = json.loads((out / "summary.json").read_text())["host"]
    assert host["samples"] == len(samples) == 2, (host, samples)
    assert host["samples_taken"] == "around"
    assert 0 <= host["cpu_user_ratio_mean"] <= 1 and 0 <= host["cpu_idle_ratio_mean"] <= 1


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


def test_bad_phase_times_are_bad_lines_and_the_status_survives(tmp_path):
    out = tmp_path / "run"
    script = (
        'f=$ACCEL_EXPORTER_PHASE_FILE; echo \'{"phase": "inf", "time": 1e999}\' >> "$f"; '
        'echo \'{"phase": "huge", "time": 1' + "0" * 400 + '}\' >> "$f"; '
        'echo \'{"phase": "fine"}\' >> "$f"; sleep 0.5; exit 7'
    )
    result = record(out, "sh", "-c", script, args=("--interval", "100ms"))
    assert result.returncode == 7, result.stderr
    assert "Traceback" not in result.stderr
    log = run_log(out)
    bad = [e["detail"] for e in log if e.get("event") == "bad_phase_line"]
    assert bad == ["time must be a finite number (Unix seconds)"] * 2, log
    assert log[-1]["type"] == "exit" and log[-1]["status"] == 7
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 7 and [p["name"] for p in summary["phases"]] == ["fine"]


def test_a_summary_that_cannot_be_written_keeps_the_status(tmp_path):
    out = tmp_path / "run"
    # The command blocks the summary's temporary file with a directory (root ignores
    # permission bits, so a read-only directory would prove nothing here).
    script = 'mkdir "$(dirname "$ACCEL_EXPORTER_PHASE_FILE")/summary.json.tmp"; exit 7'
    result = record(out, "sh", "-c", script)
    assert result.returncode == 7, result.stderr
    assert "record_error" in result.stderr and "Traceback" not in result.stderr
    assert not (out / "summary.json").exists()
    assert run_log(out)[-1] == {**run_log(out)[-1], "type": "exit", "status": 7}


def test_a_full_disk_keeps_the_status(tmp_path):
    out = tmp_path / "run"

    # Writes past 1 KiB fail with EFBIG, as a full disk fails them with ENOSPC. The limit
    # is set by a small exec wrapper, not preexec_fn (unsafe in a threaded test runner).
    small_files = (
        "import os, resource, sys; "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    command = cli_command(
        "record", "--interval", "100ms", "--out", str(out), "--", "sh", "-c", "sleep 1; exit 7"
    )
    result = subprocess.run(
        [sys.executable, "-c", small_files, *command],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 7, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "record_error" in line]
    assert len(errors) == 1 and "run log" in errors[0], result.stderr
    assert (out / "run.jsonl").stat().st_size <= 1024
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 7


def test_sigterm_is_passed_on_and_the_command_status_returned(tmp_path):
    out = tmp_path / "run"
    command = "trap 'echo got TERM; exit 42' TERM; while :; do sleep 0.1; done"
    proc = subprocess.Popen(
        cli_command("record", "--interval", "100ms", "--out", str(out), "--", "sh", "-c", command),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def samples() -> int:
            log = run_log(out) if (out / "run.jsonl").exists() else []
            return sum(1 for line in log if line["type"] == "sample")

        eventually(lambda: samples() >= 2, timeout=60, what="two record samples")
        proc.send_signal(signal.SIGTERM)  # to record only, not to its process group
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 42, stderr
    assert stdout == "got TERM\n"
    assert run_log(out)[-1] == {**run_log(out)[-1], "type": "exit", "status": 42}
    assert json.loads((out / "summary.json").read_text())["exit_status"] == 42


def test_out_defaults_to_a_new_directory_and_stderr_stays_the_commands(tmp_path):
    # newcomer-4 F12: `record -- sleep 1` was a usage error, and the recorder's info
    # lines (JSON) were mixed into the command's stderr.
    command = "echo to-stderr >&2; exit 3"
    result = subprocess.run(
        cli_command("record", "--log.level", "info", "--", "sh", "-c", command),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert result.returncode == 3, result.stderr
    (made,) = tmp_path.glob("record-*Z")
    assert f"writing the run to {made.name}" in result.stderr
    assert run_log(made)[-1]["status"] == 3
    # The command's line, the recorder's line naming the directory, and its warnings
    # (here: no accelerator on this machine), never its info lines.
    lines = result.stderr.splitlines()
    plain = [line for line in lines if not line.startswith("{")]
    assert plain == [f"accel-exporter record: writing the run to {made.name}", "to-stderr"]
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    assert {e["level"] for e in logged} <= {"warning", "error"}, logged
    assert [e["event"] for e in logged] == ["no accelerator found"], logged
