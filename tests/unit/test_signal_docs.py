"""The docs say what each fabric, trend and diagnostic signal does, and agree with the code.

docs/fabric.md's two verdict tables (the evidence reasons, the fabric trend rules),
docs/diagnostics.md's reasons and bad-input table, and the Grafana fabric row's trend
panel are read here and compared with what exporter/ posts; a reason or rule added to
the code without its line in the docs (or the panel) fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from exporter.catalog.vocabulary import DIAG_FILE_REJECTIONS
from exporter.diag import advice as diag_advice
from exporter.fabric import evidence_rules
from exporter.trend import FABRIC_RULES, RULES
from exporter.verdict import DEGRADED

REPO = Path(__file__).resolve().parents[2]
FABRIC = (REPO / "docs" / "fabric.md").read_text()
DIAGNOSTICS = (REPO / "docs" / "diagnostics.md").read_text()


def section(text: str, heading: str) -> str:
    """The text of one ``## heading`` section, up to the next one."""
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every Markdown table in ``text``, each cell stripped."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def first_cells(text: str) -> list[str]:
    """The first cell of each row whose first cell is one code span (``reason``)."""
    out = []
    for row in table_rows(text):
        m = re.fullmatch(r"`([a-z0-9_]+)`", row[0])
        if m:
            out.append(m.group(1))
    return out


def test_the_fabric_verdict_table_names_every_evidence_reason_once() -> None:
    verdict = section(FABRIC, "What it does to the verdict")
    evidence_table = verdict[: verdict.index("Each item is dated")]
    assert first_cells(evidence_table) == list(evidence_rules.REASONS)
    assert "Every reason is **degraded**, never failed" in verdict
    # What the page says, the code does: every item the fabric posts is degraded.
    made = [
        evidence_rules.nic_missing("mlx5_0", "", 0.0, 1.0),
        evidence_rules.nic_port_down("mlx5_0", "1", 0.0, 1.0),
    ]
    assert [item.state for item in made] == [DEGRADED, DEGRADED]


def test_the_fabric_trend_table_agrees_with_the_shipped_rules() -> None:
    verdict = section(FABRIC, "What it does to the verdict")
    trend_table = verdict[verdict.index("Each item is dated") :]
    rows = {r[0].strip("`"): r for r in table_rows(trend_table) if r[0].startswith("`")}
    assert set(rows) == {rule.reason for rule in FABRIC_RULES}
    for rule in FABRIC_RULES:
        row = rows[rule.reason]
        windows = f"{rule.raise_windows} / {rule.clear_windows} windows of {rule.length_s:g} s"
        assert row[3].startswith(windows), (rule.reason, row[3])
        assert row[4] == f"`{rule.state}`", rule.reason
        assert rule.family in trend_table


def test_the_grafana_trend_panel_lists_every_trend_reason() -> None:
    board = json.loads((REPO / "deploy" / "grafana" / "node-gpu-detail.json").read_text())
    (panel,) = [p for p in board["panels"] if p.get("title") == "Trend verdicts and downgrades"]
    (expr,) = [t["expr"] for t in panel["targets"] if "reason=~" in t["expr"]]
    listed = re.search(r'reason=~"([^"]+)"', expr)
    assert listed is not None
    assert set(listed.group(1).split("|")) == {rule.reason for rule in RULES}


def test_the_diagnostics_page_names_each_reason_and_each_refusal() -> None:
    verdict = section(DIAGNOSTICS, "What a result does to the verdict")
    for reason in diag_advice.REASONS:
        assert f"`{reason}`" in verdict, reason
    bad = section(DIAGNOSTICS, "Bad input")
    counted = set(re.findall(r"\| `([a-z_]+)` \|$", bad, re.M))
    assert counted == set(DIAG_FILE_REJECTIONS)
    assert "schema_drift" in bad
