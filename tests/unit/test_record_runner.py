"""The recorder's own bookkeeping: marker order, baseline and final samples, failures."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

from structlog.testing import capture_logs

from exporter.config.source import SourceConfig
from exporter.model import OK, Reading, Snapshot
from exporter.record.runlog import RunLog
from exporter.record.runner import PHASE_FILE, SUMMARY, Recorder, RecordOptions
from exporter.record.stats import DeviceSample, RunStats
from exporter.sources.base import Source
from tests.helpers.devices import info

UUID = "GPU-0"


def energy(joules: float, at: float) -> Snapshot:
    readings = (info("0", UUID), Reading("accel_energy_joules_total", ("0", UUID), joules))
    return Snapshot("nvml", readings, OK, at - 0.1, at, time.monotonic(), 0.1, 60.0)


def mark(out, **item) -> None:
    with open(out / PHASE_FILE, "a") as fh:
        fh.write(json.dumps(item) + "\n")


def recorder(tmp_path) -> Recorder:
    rec = Recorder(RecordOptions(tmp_path, ["true"]), [])
    (tmp_path / PHASE_FILE).write_text("")
    rec.run_log = RunLog(tmp_path / "run.jsonl")
    rec.stats = RunStats(1000.0)
    return rec


def test_a_marker_read_late_still_begins_its_phase_before_the_samples_after_it(tmp_path):
    rec = recorder(tmp_path)
    rec._sample([energy(500.0, 1000.0)], aggregate=False, markers=False)  # baseline
    # The job marks "train" at 1001 and then spends 150 J; the poll that sees them
    # completes at 1002, and the marker is only read after it (a slow poll).
    mark(tmp_path, phase="train", time=1001.0)
    rec._sample([energy(650.0, 1002.0)])
    # A marker stamped after a poll completed begins after that poll's sample.
    mark(tmp_path, phase="eval", time=1003.5)
    rec._sample([energy(700.0, 1003.0)])
    rec._sample([energy(700.0, 1004.0)])
    rec.stats.finish(1005.0)
    phases = {p["name"]: p for p in rec.stats.summary()["phases"]}
    assert phases["train"]["devices"][UUID]["energy_joules"] == 200.0
    assert phases["eval"]["devices"][UUID]["energy_joules"] == 0.0
    rec.run_log.close()


def test_baseline_and_final_samples_count_only_for_energy():
    stats = RunStats(0.0)
    stats.add_device(0.0, UUID, DeviceSample(1.0, 0.0, 50.0, 100.0), aggregate=False)
    stats.add_device(1.0, UUID, DeviceSample(9.0, 1.0, 300.0, 400.0))
    stats.add_device(2.0, UUID, DeviceSample(2.0, 0.0, 50.0, 450.0), aggregate=False)
    dev = stats.summary()["devices"][UUID]
    assert dev["utilization_ratio"] == {"mean": 1.0, "max": 1.0}
    assert dev["power_watts"] == {"mean": 300.0, "max": 300.0}
    assert dev["peak_memory_bytes"] == 9.0 and dev["samples"] == 1
    assert dev["energy_joules"] == 350.0


class OneGpu(Source):
    """A device source with one GPU and an energy counter."""

    async def poll(self) -> Sequence[Reading]:
        return [info("0", UUID), Reading("accel_energy_joules_total", ("0", UUID), 1.0)]


def test_a_sampling_pass_that_fails_is_logged_once_and_recording_goes_on(tmp_path, monkeypatch):
    def broken(self, reading, devices, host):
        raise RuntimeError("sampling bug")

    monkeypatch.setattr(Recorder, "_take", broken)
    source = OneGpu("nvml", SourceConfig(enabled=True, interval=1.0, timeout=5.0))
    options = RecordOptions(tmp_path / "run", ["sh", "-c", "sleep 0.6; exit 7"], interval=0.05)
    with capture_logs() as logs:
        status = asyncio.run(Recorder(options, [source]).run())
    assert status == 7
    errors = [e for e in logs if e["event"] == "record_error"]
    assert [e["what"] for e in errors] == ["sample", "final sample"], errors
    summary = json.loads((tmp_path / "run" / SUMMARY).read_text())
    assert summary["exit_status"] == 7
    assert summary["record_errors"]["sample"] >= 3 and summary["record_errors"]["final sample"] == 1
    last = json.loads((tmp_path / "run" / "run.jsonl").read_text().splitlines()[-1])
    assert last["type"] == "exit" and last["status"] == 7 and "sample" in last["record_errors"]


def test_a_command_shorter_than_the_interval_gets_its_figures_from_the_samples_around_it():
    # `record -- sleep 1` at the default 1 s interval: no poll completes while the
    # command runs, only the baseline before and the final sample after it.
    stats = RunStats(10.0)
    stats.add_device(9.9, UUID, DeviceSample(1.0, 0.0, 50.0, 100.0), aggregate=False)
    stats.add_host(0.2, 0.7, aggregate=False)
    stats.add_device(11.1, UUID, DeviceSample(3.0, 0.5, 70.0, 160.0), aggregate=False)
    stats.add_host(0.4, 0.5, aggregate=False)
    stats.finish(11.0)
    summary = stats.summary()
    dev = summary["devices"][UUID]
    assert dev["samples"] == 2 and dev["samples_taken"] == "around"
    assert dev["utilization_ratio"] == {"mean": 0.25, "max": 0.5}
    assert dev["peak_memory_bytes"] == 3.0
    assert dev["energy_joules"] == 60.0
    assert summary["host"]["samples"] == 2 and summary["host"]["samples_taken"] == "around"
    assert abs(summary["host"]["cpu_user_ratio_mean"] - 0.3) < 1e-9


def test_samples_taken_while_the_command_ran_leave_the_bracketing_ones_out():
    stats = RunStats(0.0)
    stats.add_host(0.9, 0.1, aggregate=False)
    stats.add_host(0.5, 0.5)
    stats.add_host(0.9, 0.1, aggregate=False)
    host = stats.summary()["host"]
    assert host["samples"] == 1 and host["samples_taken"] == "during"
    assert host["cpu_user_ratio_mean"] == 0.5
