"""neuron-monitor report parsing: documented values out, anything else a named problem."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.host.neuron_report import BadReport, parse
from tests.fakes.neuron.neuron_monitor import report

SCENARIO = {
    "devices": 2,
    "cores_per_device": 2,
    "runtimes": [
        {
            "tag": "a",
            "util": {"0": 12.5},
            "memory": {"1": {"tensors": 10}},
            "status": {"completed": 4},
            "errors": {"numerical": 1},
            "latency": {"p50": 0.1},
        }
    ],
    "ecc": [{"neuron_device_index": 1, "mem_ecc_uncorrected": 1, "sram_ecc_uncorrected": 2}],
}


def line(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def test_the_documented_schema() -> None:
    got = parse(line(report(SCENARIO, 5.0)))
    assert got.problems == ()
    (runtime,) = got.runtimes
    assert runtime.tag == "a" and runtime.core_utilization == {0: 12.5}
    assert runtime.core_memory == {1: {"tensors": 10.0}}
    assert runtime.status == {"completed": 4} and runtime.errors == {"numerical": 1}
    assert runtime.latency == {("total_latency", "p50"): 0.1, ("device_latency", "p50"): 0.1}
    assert got.ecc == {(1, "uncorrected"): 3}
    assert got.hardware is not None and got.hardware.cores_per_device == 2


def test_null_latency_and_untagged_runtime() -> None:
    doc = report({"runtimes": [{"pid": 99, "latency": None}]}, 1.0)
    (runtime,) = parse(line(doc)).runtimes
    assert runtime.tag == "99" and runtime.latency == {}


@pytest.mark.parametrize(
    ("path", "bad", "problem"),
    [
        (("neuroncore_counters", "neuroncores_in_use", "0", "neuroncore_utilization"), 101, "101"),
        (
            ("neuroncore_counters", "neuroncores_in_use", "0", "neuroncore_utilization"),
            "5",
            "number",
        ),
        (("execution_stats", "execution_summary", "completed"), 1.5, "whole"),
        (("execution_stats", "execution_summary", "completed"), True, "number"),
        (("execution_stats", "execution_summary", "completed"), float("nan"), "outside"),
        (("memory_used", "neuron_runtime_used_bytes", "host"), -1, "outside"),
        (("execution_stats", "error"), "runtime failed", "runtime failed"),
    ],
)
def test_a_bad_field_drops_its_group(path: tuple[str, ...], bad: Any, problem: str) -> None:
    doc = report(SCENARIO, 5.0)
    node = doc["neuron_runtime_data"][0]["report"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    got = parse(line(doc))
    assert any(problem in p for p in got.problems), got.problems
    (runtime,) = got.runtimes
    group = path[0]
    if group == "execution_stats":
        assert runtime.status == {} and runtime.core_utilization == {0: 12.5}
    elif group == "neuroncore_counters":
        assert runtime.core_utilization == {} and runtime.status == {"completed": 4}
    assert got.ecc == {(1, "uncorrected"): 3}  # other groups untouched


@pytest.mark.parametrize("raw", [b"", b"garbage\n", b"[1, 2]\n", b'{"a": [' * 100000 + b"\n"])
def test_not_a_report(raw: bytes) -> None:
    with pytest.raises(BadReport):
        parse(raw)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
_keys = st.sampled_from(
    [
        "neuron_runtime_data",
        "system_data",
        "neuron_hardware_info",
        "report",
        "error",
        "pid",
        "neuron_runtime_tag",
        "neuroncore_counters",
        "neuroncores_in_use",
        "0",
        "execution_stats",
        "execution_summary",
        "completed",
        "neuron_hw_counters",
        "neuron_devices",
        "memory_used",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, st.recursive(_json, lambda i: st.dictionaries(_keys, i, max_size=3))))
def test_any_json_is_a_report_or_bad_report(doc: dict[str, Any]) -> None:
    try:
        got = parse(json.dumps(doc))
    except BadReport:
        return
    for runtime in got.runtimes:
        assert all(0 <= v <= 100 for v in runtime.core_utilization.values())
        assert all(isinstance(v, int) and v >= 0 for v in runtime.status.values())
    assert all(isinstance(v, int) and v >= 0 for v in got.ecc.values())
