"""NVIDIA Health Validation NodeVerdicts: built from the documented schema (fixture README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter import actions
from exporter.diag import advice, formats, hv
from exporter.diag.model import (
    FAIL,
    HEALTH_VALIDATION,
    PASS,
    SCHEMA_DRIFT,
    SKIP,
    TRUNCATED,
    WARN,
    DeviceResult,
    DiagError,
    Run,
)
from exporter.verdict import DEGRADED, FAILED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diag"
UUID1 = "GPU-a1b2c301-1111-2222-3333-000000004456"


def parse(doc: dict[str, Any]) -> Run:
    return formats.parse(json.dumps(doc).encode())


def refused(doc: dict[str, Any]) -> DiagError:
    with pytest.raises(DiagError) as caught:
        parse(doc)
    return caught.value


def component(entities: list[str], worst: str, checks: list[str] | None = None) -> dict[str, Any]:
    return {
        "check_ids": checks or ["gpu_xid_46"],
        "entities": entities,
        "category": "xid",
        "max_severity": worst,
    }


def by_key(run: Run) -> dict[tuple[str, str, str, str], DeviceResult]:
    """(entity, uuid, bus id, test) -> result, each once."""
    out: dict[tuple[str, str, str, str], DeviceResult] = {}
    for r in run.results:
        key = (r.entity, r.uuid, r.pci_bus_id, r.test)
        assert key not in out, key
        out[key] = r
    return out


def test_the_critical_sample_blames_gpu_1_and_keeps_node_checks_at_the_node() -> None:
    run = formats.parse((FIXTURES / "hv-documented-critical.json").read_bytes())
    assert (run.suite, run.vendor, run.version, run.runtime_error) == (
        HEALTH_VALIDATION,
        "nvidia",
        "",
        "",
    )
    got = by_key(run)
    assert set(got) == {
        ("", "", "", "node_verdict"),
        ("", UUID1, "", "xid"),
        ("", "", "", "infiniband"),
        ("", "", "", "cpu"),
    }
    gpu = got[("", UUID1, "", "xid")]
    assert (gpu.result, gpu.node) == (FAIL, False)
    assert [(i.code, i.severity, i.category) for i in gpu.issues] == [
        ("gpu_xid_46", "critical", "xid")
    ]
    # cpu_count names entity "0": a node check is never GPU 0's result.
    for test in ("node_verdict", "infiniband", "cpu"):
        assert got[("", "", "", test)].result == FAIL
        assert got[("", "", "", test)].node
    assert [i.code for i in got[("", "", "", "node_verdict")].issues] == ["overall_severity"]


def test_the_pass_sample_is_one_passing_node_verdict() -> None:
    run = formats.parse((FIXTURES / "hv-documented-pass.json").read_bytes())
    (only,) = run.results
    assert (only.node, only.test, only.result) == (True, "node_verdict", PASS)


def test_two_entities_in_one_component_blame_neither() -> None:
    """max_severity is the worse of the two: which one is not said, so each is at most INFO."""
    run = formats.parse((FIXTURES / "hv-documented-warning.json").read_bytes())
    got = by_key(run)
    assert got[("", "", "", "xid")].result == WARN  # the node's
    for bus in ("0000:3b:00.0", "0000:86:00.0"):
        one = got[("", "", bus, "xid")]
        assert (one.result, [i.severity for i in one.issues]) == (PASS, ["info"])
        assert advice.judge(HEALTH_VALIDATION, one) is None


@pytest.mark.parametrize(
    ("severity", "result", "state"),
    [
        ("CRITICAL", FAIL, FAILED),
        ("WARNING", WARN, DEGRADED),
        ("INFO", PASS, None),
        ("PASS", PASS, None),
        ("UNKNOWN", SKIP, None),
    ],
)
def test_each_severity(severity: str, result: str, state: str | None) -> None:
    run = parse({"overall_severity": severity, "components": [component(["1"], severity)]})
    (gpu,) = [r for r in run.results if not r.node]
    assert (gpu.entity, gpu.result) == ("1", result)
    hit = advice.judge(HEALTH_VALIDATION, gpu)
    assert (hit.state if hit else None) == state


def test_the_ladder_gives_the_action_and_its_next_rung() -> None:
    (gpu,) = [
        r
        for r in parse(
            {"overall_severity": "CRITICAL", "c": [component(["1"], "CRITICAL")]}
        ).results
        if not r.node
    ]
    hit = advice.judge(HEALTH_VALIDATION, gpu)
    assert hit is not None
    assert (hit.reason, hit.state) == ("diag_failed", FAILED)
    a = hit.advice
    assert (a.action, a.escalation, a.provenance) == (
        actions.RESET_DEVICE,
        actions.SERVICE,
        "vendor_catalog",
    )
    assert a.reference == "https://docs.nvidia.com/health-validation/reference/checks/xid.md"


def test_a_warning_degrades_and_an_uncatalogued_check_asks_for_service() -> None:
    doc = {"overall_severity": "WARNING", "c": [component([UUID1], "WARNING", ["gpu_xid_warning"])]}
    (gpu,) = [r for r in parse(doc).results if not r.node]
    assert (gpu.uuid, gpu.entity) == (UUID1, "")
    hit = advice.judge(HEALTH_VALIDATION, gpu)
    assert hit is not None
    assert (hit.reason, hit.state) == ("diag_warning", DEGRADED)
    assert (hit.advice.action, hit.advice.provenance) == (actions.SERVICE, "unknown_code")


def test_the_worst_ladder_of_a_component_leads() -> None:
    """Two checks on one GPU: the more disruptive first rung leads."""
    doc = {
        "overall_severity": "CRITICAL",
        "c": [component(["0000:3B:00.0"], "CRITICAL", ["gpu_xid_46", "nvlink_active"])],
    }
    (gpu,) = [r for r in parse(doc).results if not r.node]
    assert gpu.pci_bus_id == "0000:3B:00.0"
    assert hv.advice_for(gpu).action == actions.SERVICE  # nvlink_active: no ladder read


@pytest.mark.parametrize(
    "doc",
    [
        {"overall_severity": "Critical"},
        {"overall_severity": "FATAL"},
        {"overall_severity": 3},
        {"overall_severity": None},
        {"overall_severity": "PASS", "c": [{"check_ids": ["x"], "entities": ["1"]}]},
        {"overall_severity": "PASS", "c": [component(["1"], "SEVERE")]},
        {"overall_severity": "PASS", "c": [{**component(["1"], "INFO"), "entities": "1"}]},
        {"overall_severity": "PASS", "c": [{**component(["1"], "INFO"), "check_ids": [1]}]},
        {"overall_severity": "PASS", "c": [{**component(["1"], "INFO"), "category": ""}]},
        {"overall_severity": "PASS", "c": [component([str(i) for i in range(65)], "INFO")]},
        {"overall_severity": "PASS", "c": [component(["1"], "INFO", [f"c{i}" for i in range(65)])]},
    ],
)
def test_undocumented_shapes_are_drift(doc: dict[str, Any]) -> None:
    exc = refused(doc)
    assert (exc.reason, exc.suite) == (SCHEMA_DRIFT, HEALTH_VALIDATION)


def test_unrelated_lists_are_not_components() -> None:
    run = parse({"overall_severity": "PASS", "names": ["a", 1], "objs": [{"x": 1}]})
    assert [r.test for r in run.results] == ["node_verdict"]


def test_entities_that_name_no_gpu_stay_at_the_node() -> None:
    run = parse({"overall_severity": "CRITICAL", "c": [component(["gpu1"], "CRITICAL")]})
    assert all(r.node for r in run.results)
    assert {r.test: r.result for r in run.results} == {"node_verdict": FAIL, "xid": FAIL}


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.9])
def test_a_truncated_sample_is_truncated(cut: float) -> None:
    data = (FIXTURES / "hv-documented-critical.json").read_bytes()
    with pytest.raises(DiagError) as caught:
        formats.parse(data[: int(len(data) * cut)])
    assert caught.value.reason == TRUNCATED
