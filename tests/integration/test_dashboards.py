"""The shipped Grafana dashboards: portable (datasource variable), well-formed, valid PromQL."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.deploy import dashboards, need
from tests.helpers.promql import all_panels, as_promql, dashboard_queries

BOARDS = dashboards()
EXPECTED = {"cluster-overview.json", "node-gpu-detail.json", "ccl-jobs.json"}
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}


def datasource_refs(node: Any, path: str = "$") -> list[tuple[str, Any]]:
    """Every "datasource" value anywhere in the document."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                out.append((f"{path}.{key}", value))
            out += datasource_refs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += datasource_refs(value, f"{path}[{i}]")
    return out


def test_the_three_dashboards_ship() -> None:
    assert set(BOARDS) == EXPECTED


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_datasource_is_a_variable_never_a_hard_coded_uid(name: str) -> None:
    board = BOARDS[name]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    refs = datasource_refs(board)
    assert refs, "no datasource references at all"
    for where, ref in refs:
        if where.startswith("$.annotations"):
            assert ref == {"type": "grafana", "uid": "-- Grafana --"}, where  # built-in annotations
        else:
            assert ref == DATASOURCE_REF, where
    # An exported dashboard pins its datasource through __inputs; this one must not.
    assert "__inputs" not in board and "${DS_" not in json.dumps(board)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_dashboard_structure(name: str) -> None:
    board = BOARDS[name]
    assert board["uid"].startswith("accel-exporter-") and len(board["uid"]) <= 40
    assert "accel-exporter" in board["tags"]
    assert isinstance(board["schemaVersion"], int)
    panels = all_panels(board)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel.get("description"), panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
    variables = [v["name"] for v in board["templating"]["list"]]
    assert variables[:2] == ["datasource", "job"]


def test_dashboard_uids_and_titles_are_unique() -> None:
    assert len({b["uid"] for b in BOARDS.values()}) == len(BOARDS)
    assert len({b["title"] for b in BOARDS.values()}) == len(BOARDS)


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses expressions only inside rule files: wrap each query in a recording rule.
    rules, where = [], []
    for name, board in BOARDS.items():
        for place, expr in dashboard_queries(board):
            rules.append({"record": f"dashboard_query_{len(rules)}", "expr": as_promql(expr)})
            where.append(f"{name} {place}")
    assert len(rules) > 60
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [need("promtool", "apt-get install prometheus"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        result.stdout
        + result.stderr
        + "\n"
        + "\n".join(f"dashboard_query_{i}: {w}" for i, w in enumerate(where))
    )


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_queries_filter_on_the_job_variable(name: str) -> None:
    # Raw accel_* series are selected through the scrape job, so one Grafana can show
    # several deployments; recording-rule outputs and Prometheus' own series are exempt.
    for place, expr in dashboard_queries(BOARDS[name]):
        if place == "variable job":
            continue  # the variable that lists the jobs
        if (
            "accel_" in expr
            and ":" not in expr.split("{")[0]
            and not expr.startswith("count(ALERTS")
        ):
            assert 'job="$job"' in expr, f"{place}: {expr}"


RECORDED = re.compile(r"\b[a-z_]+:[a-z_0-9]+:[a-z_0-9]+\b")


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panels_that_need_the_recording_rules_say_so(name: str) -> None:
    for panel in _panels(BOARDS[name]["panels"]):
        exprs = [t.get("expr", "") for t in panel.get("targets", [])]
        if any(RECORDED.search(e) for e in exprs):
            assert "recording rules" in panel.get("description", ""), panel["title"]


def _variables(name: str) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in BOARDS[name]["templating"]["list"]}


def test_a_gpu_is_picked_by_index_and_model_as_well_as_uuid() -> None:
    variables = _variables("node-gpu-detail.json")
    assert ", device)" in variables["index"]["query"]["query"]
    assert ", model)" in variables["model"]["query"]["query"]
    gpu = variables["gpu"]["query"]["query"]
    assert 'device=~"$index"' in gpu and 'model=~"$model"' in gpu and gpu.endswith(", uuid)")


def test_namespace_and_slurm_job_variables_filter_the_workload_tables() -> None:
    variables = _variables("cluster-overview.json")
    assert "accel_device_workload_info" in variables["namespace"]["query"]["query"]
    assert "accel_device_job_info" in variables["slurm_job"]["query"]["query"]
    exprs = [
        t.get("expr", "")
        for panel in _panels(BOARDS["cluster-overview.json"]["panels"])
        for t in panel.get("targets", [])
    ]
    assert any('namespace=~"$namespace"' in e for e in exprs)
    assert any('job_id=~"$slurm_job"' in e for e in exprs)
