"""gpu-validate's phase runner (deadline per phase, failures recorded, processes reaped)
and its report (verdict, exit status, the two files)."""

from __future__ import annotations

import json
import sys
import time

from scripts.gpuvalidate.compare import Check
from scripts.gpuvalidate.phases import Kit, Skip, run
from scripts.gpuvalidate.report import ERROR, FAILED, PASSED, SKIPPED, Phase, exit_status, write
from scripts.gpuvalidate.smi import Smi


def kit(tmp_path, budget: float = 120.0) -> Kit:
    return Kit(
        out=tmp_path,
        python=sys.executable,
        smi=Smi("/nonexistent"),
        deadline=time.monotonic() + budget,
    )


def test_a_phase_that_raises_is_an_error_and_the_traceback_is_kept(tmp_path):
    k = kit(tmp_path)

    def boom(kit: Kit, phase: Phase) -> None:
        phase.check("first", True)
        raise ValueError("driver said no")

    phase = run(k, "boom", boom, 30)
    assert phase.status == ERROR and phase.reason == "ValueError: driver said no"
    assert "ValueError: driver said no" in (k.work / "errors.log").read_text()


def test_a_phase_past_its_deadline_is_an_error_and_its_processes_are_killed(tmp_path):
    k = kit(tmp_path)
    started = []

    def hang(kit: Kit, phase: Phase) -> None:
        started.append(kit.spawn([sys.executable, "-c", "import time; time.sleep(60)"]))
        time.sleep(60)

    phase = run(k, "hang", hang, 6)
    assert phase.status == ERROR and phase.reason == "timed out after 6 s"
    assert started[0].poll() is not None  # killed and reaped
    # The next phase runs.
    assert run(k, "next", lambda kit, phase: None, 30).status == PASSED


def test_skip_failed_check_and_budget(tmp_path):
    k = kit(tmp_path)

    def skip(kit: Kit, phase: Phase) -> None:
        raise Skip("no torch")

    assert (run(k, "s", skip, 30).status, run(k, "s", skip, 30).reason) == (SKIPPED, "no torch")
    failing = run(k, "f", lambda kit, phase: phase.check("x", False, seen=1, bound="0"), 30)
    assert failing.status == FAILED
    spent = kit(tmp_path, budget=10.0)  # less than the reserve kept for the end
    late = run(spent, "late", lambda kit, phase: None, 30)
    assert late.status == ERROR and "budget" in late.reason


def test_exit_status_only_fails_on_a_disagreement():
    assert exit_status([Phase("a"), Phase("b", SKIPPED, "no torch"), Phase("c", ERROR, "x")]) == 0
    assert exit_status([Phase("a"), Phase("b", FAILED)]) == 1


def test_no_gpu_seen_is_not_a_pass(tmp_path):
    # newcomer-4 F8: nvidia-smi missing or listing nothing validated nothing.
    ran = [Phase("install", ERROR, "no nvidia-smi"), Phase("load", SKIPPED, "no torch")]
    assert exit_status(ran, gpus=[]) == 3
    assert exit_status([*ran, Phase("compare", FAILED)], gpus=[]) == 1  # a disagreement wins
    assert exit_status(ran, gpus=["H100 GPU-1"]) == 0
    report, summary = write(tmp_path, ran, {"started": "now"})
    assert json.loads(report.read_text())["exit_status"] == 3
    text = summary.read_text()
    assert "GPUs: none seen" in text and text.rstrip().endswith("exit status 3")


def test_report_files(tmp_path):
    compare = Phase("compare", FAILED, seconds=5.2)
    compare.checks += [
        Check("power.draw", "GPU-1", "fail", "512.00", [300.0, 301.0], "±15", "outside [285, 316]"),
        Check("memory.total", "GPU-1", "pass", "81559", [81559.0, 81559.0], "exact"),
    ]
    compare.figures["daemon_ready_seconds"] = 0.61
    load = Phase("load", SKIPPED, "torch with CUDA is not usable here: no torch")
    report, summary = write(tmp_path, [compare, load], {"started": "now", "gpus": ["H100 GPU-1"]})
    doc = json.loads(report.read_text())
    assert doc["exit_status"] == 1
    assert [p["status"] for p in doc["phases"]] == ["failed", "skipped"]
    assert doc["phases"][0]["checks"][0]["nvidia_smi"] == "512.00"
    text = summary.read_text()
    assert "compare      FAILED" in text and "1 pass, 1 fail, 0 skip" in text
    assert "power.draw [GPU-1]: nvidia-smi 512.00, exporter 300/301; ±15; outside" in text
    assert "load         SKIPPED" in text and "no torch" in text
    assert "daemon_ready_seconds: 0.61" in text
    assert text.rstrip().endswith("exit status 1")


def test_stop_ends_a_process_that_does_not_lead_its_own_group():
    import subprocess

    from scripts.gpuvalidate.phases import stop

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop(proc, grace=5)
    assert proc.poll() is not None
