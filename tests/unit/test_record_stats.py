"""Run aggregates and the phase file reader, with exact numbers."""

from __future__ import annotations

import pytest

from exporter.record.phases import PhaseTail, parse_line
from exporter.record.stats import DeviceSample, Energy, RunStats

GIB = 1024**3


def test_device_aggregates_and_energy_from_the_counter():
    stats = RunStats(100.0)
    samples = [
        # time, memory, util, power, energy counter
        (100.0, 1 * GIB, 0.0, 100.0, 5000.0),
        (101.0, 3 * GIB, 0.5, 300.0, 5200.0),
        (102.0, 2 * GIB, 1.0, 200.0, 5450.0),
    ]
    for when, mem, util, power, energy in samples:
        stats.add_device(when, "GPU-a", DeviceSample(mem, util, power, energy))
    stats.finish(102.0)
    dev = stats.summary()["devices"]["GPU-a"]
    assert dev["peak_memory_bytes"] == 3 * GIB
    assert dev["utilization_ratio"] == {"mean": 0.5, "max": 1.0}
    assert dev["power_watts"] == {"mean": 200.0, "max": 300.0}
    assert dev["energy_joules"] == 450.0 and dev["energy_method"] == "counter"
    assert dev["samples"] == 3


def test_counter_reset_loses_only_its_interval():
    energy = Energy()
    for value in (1000.0, 1100.0, 30.0, 80.0):
        energy.add_counter(value)
    assert energy.summary() == (100.0 + 30.0 + 50.0, "counter")


def test_power_integral_when_there_is_no_counter():
    stats = RunStats(0.0)
    for when, watts in ((0.0, 100.0), (2.0, 300.0), (3.0, 300.0)):
        stats.add_device(when, "GPU-b", DeviceSample(power_watts=watts))
    dev = stats.summary()["devices"]["GPU-b"]
    assert dev["energy_joules"] == pytest.approx(2 * 200.0 + 1 * 300.0)
    assert dev["energy_method"] == "power_integral"
    assert dev["peak_memory_bytes"] is None


def test_phases_split_the_run():
    stats = RunStats(0.0)
    stats.add_device(0.0, "g", DeviceSample(GIB, 0.1, 50.0, 0.0))
    stats.begin_phase("load", 0.5, {})
    stats.add_device(1.0, "g", DeviceSample(2 * GIB, 0.2, 60.0, 10.0))
    stats.add_host(0.4, 0.5)
    stats.begin_phase("train", 1.5, {"epoch": 1})
    stats.add_device(2.0, "g", DeviceSample(8 * GIB, 0.9, 400.0, 410.0))
    stats.add_device(3.0, "g", DeviceSample(6 * GIB, 0.7, 380.0, 800.0))
    stats.add_host(0.9, 0.05)
    stats.finish(3.5)
    summary = stats.summary()
    load, train = summary["phases"]
    assert (load["name"], load["wall_seconds"], load["data"]) == ("load", 1.0, {})
    assert (train["name"], train["end"], train["data"]) == ("train", 3.5, {"epoch": 1})
    assert load["devices"]["g"]["energy_joules"] == 10.0
    assert train["devices"]["g"]["energy_joules"] == 790.0
    assert train["devices"]["g"]["peak_memory_bytes"] == 8 * GIB
    assert train["devices"]["g"]["utilization_ratio"]["mean"] == pytest.approx(0.8)
    assert train["host"]["cpu_user_ratio_mean"] == 0.9
    assert summary["devices"]["g"]["energy_joules"] == 800.0
    assert summary["host"]["cpu_idle_ratio_mean"] == pytest.approx(0.275)


@pytest.mark.parametrize(
    ("line", "kind", "name"),
    [
        (b'{"phase": "train", "epoch": 3}', "phase", "train"),
        (b'{"event": "checkpoint_saved", "time": 12.5}', "event", "checkpoint_saved"),
        (b'{"phase": ""}', "bad", 'needs a non-empty "phase" or "event" string'),
        (b'{"phase": "x", "time": "soon"}', "bad", "time must be a number (Unix seconds)"),
        (b"[1, 2]", "bad", "not a JSON object"),
        (b"\xff\xfe", "bad", None),
        (b"not json", "bad", None),
    ],
)
def test_parse_line(line, kind, name):
    marker = parse_line(line, 99.0)
    assert marker.kind == kind
    if name is not None:
        assert marker.name == name
    if kind == "event":
        assert marker.time == 12.5 and marker.data == {}
    if kind == "phase":
        assert marker.time == 99.0 and marker.data == {"epoch": 3}


def test_tail_follows_appends_partial_lines_and_truncation(tmp_path):
    path = tmp_path / "phases.jsonl"
    path.write_bytes(b"")
    tail = PhaseTail(str(path))
    assert tail.read() == []
    with path.open("ab") as fh:
        fh.write(b'{"phase": "a"}\n{"phase": "b"')
    assert [m.name for m in tail.read()] == ["a"]
    with path.open("ab") as fh:
        fh.write(b'}\n\n{"event": "e"}\n')
    assert [m.name for m in tail.read()] == ["b", "e"]
    path.write_bytes(b'{"phase": "c"}\n')  # truncated and rewritten
    assert [m.name for m in tail.read()] == ["c"]
    with path.open("ab") as fh:
        fh.write(b'{"phase": "last"}')  # no newline: only the final read takes it
    assert tail.read() == []
    assert [m.name for m in tail.read(final=True)] == ["last"]
    with path.open("ab") as fh:
        fh.write(b"x" * 70000 + b"\n")
    assert [m.kind for m in tail.read()] == ["bad"]


def test_missing_phase_file_is_no_markers(tmp_path):
    assert PhaseTail(str(tmp_path / "absent")).read() == []
