"""``record`` on a short command with the fake NVIDIA library: exact peak memory and energy."""

from __future__ import annotations

import json
import sys

from tests.helpers.cli import record, run_log

GIB = 1 << 30

# The "training job": it marks phases and drives the fake GPU through its state file,
# as real work would drive a real GPU. It knows nothing about record but the env var.
JOB = """
import json, os, sys, time
from pathlib import Path
from tests.fakes.nvml.control import LIBRARY_NAME, FakeNvml

fake = FakeNvml(Path(os.environ["LD_LIBRARY_PATH"].split(":")[0]) / LIBRARY_NAME,
                Path(os.environ["FAKE_NVML_STATE"]))
gpu = fake.device(0)
def mark(**item):
    # With "time", the phase begins when the job says, however late record reads the line.
    with open(os.environ["ACCEL_EXPORTER_PHASE_FILE"], "a") as fh:
        fh.write(json.dumps({**item, "time": time.time()}) + "\\n")
mark(phase="warmup")
time.sleep(0.4)
mark(phase="train", epoch=1)
time.sleep(0.6)
gpu.memory_used = 30 << 30
gpu.util_gpu = 100
gpu.power_mw = 350_000
gpu.energy_mj += 150_000
time.sleep(1.2)
gpu.memory_used = 10 << 30
gpu.util_gpu = 20
gpu.power_mw = 120_000
gpu.energy_mj += 50_000
time.sleep(0.6)
sys.exit(int(sys.argv[1]))
"""


def test_summary_has_peak_memory_and_energy(fake_nvml, tmp_path):
    fake = fake_nvml(2)
    for i in (0, 1):
        fake.device(i).memory_used = 1 * GIB
        fake.device(i).energy_mj = 1_000_000  # 1 kJ since the driver loaded
        fake.device(i).power_mw = 100_000
    config = tmp_path / "config.yaml"
    config.write_text("sources: {nvml: {enabled: true}}\n")
    out = tmp_path / "run"
    args = ("--config.file", str(config), "--interval", "200ms")
    result = record(out, sys.executable, "-c", JOB, "5", env=fake.env(), args=args)
    assert result.returncode == 5, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    g0, g1 = summary["devices"][fake.uuid(0)], summary["devices"][fake.uuid(1)]
    assert g0["peak_memory_bytes"] == 30 * GIB
    assert g0["energy_joules"] == 200.0 and g0["energy_method"] == "counter"
    assert g0["power_watts"]["max"] == 350.0
    assert g0["utilization_ratio"]["max"] == 1.0
    assert g0["device"] == "0" and g0["vendor"] == "nvidia"
    assert g1["peak_memory_bytes"] == 1 * GIB and g1["energy_joules"] == 0.0
    assert g1["power_watts"] == {"mean": 100.0, "max": 100.0}
    assert summary["exit_status"] == 5
    assert [p["name"] for p in summary["phases"]] == ["warmup", "train"]
    train = summary["phases"][1]
    assert train["data"] == {"epoch": 1}
    assert train["devices"][fake.uuid(0)]["peak_memory_bytes"] == 30 * GIB
    # All 200 J were spent after the train marker, whatever the machine's load.
    assert train["devices"][fake.uuid(0)]["energy_joules"] == 200.0
    warmup = summary["phases"][0]["devices"].get(fake.uuid(0), {})
    assert warmup.get("energy_joules", 0.0) == 0.0
    assert 0 <= summary["host"]["cpu_user_ratio_mean"] <= 1
    log = run_log(out)
    samples = [line for line in log if line["type"] == "sample"]
    assert samples[0]["devices"][fake.uuid(0)]["energy_joules_total"] == 1000.0
    assert samples[-1]["devices"][fake.uuid(0)]["energy_joules_total"] == 1200.0
    assert log[-1] == {**log[-1], "type": "exit", "status": 5}


def test_xid_and_lost_gpu_become_events(fake_nvml, tmp_path):
    fake = fake_nvml(1)
    out = tmp_path / "run"
    job = (
        "import os, time\n"
        "from pathlib import Path\n"
        "from tests.fakes.nvml.control import LIBRARY_NAME, FakeNvml\n"
        "fake = FakeNvml(Path(os.environ['LD_LIBRARY_PATH'].split(':')[0]) / LIBRARY_NAME,"
        " Path(os.environ['FAKE_NVML_STATE']))\n"
        "deadline = time.time() + 20\n"
        "while fake.state.event_sets < 1 and time.time() < deadline: time.sleep(0.05)\n"
        "fake.inject_xid(0, 79)\n"
        "time.sleep(1.0)\n"
        "fake.device(0).lost = 1\n"
        "time.sleep(1.0)\n"
    )
    args = ("--sources.nvml.enabled", "true", "--interval", "200ms")
    result = record(out, sys.executable, "-c", job, env=fake.env(), args=args)
    assert result.returncode == 0, result.stderr
    events = [e for e in run_log(out) if e["type"] == "event"]
    assert any(e["event"] == "xid_errors" and e["kind"] == "79" for e in events), events
    assert any(e["event"] == "device_down" and e["reason"] == "gpu_lost" for e in events), events
