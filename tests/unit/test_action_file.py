"""Action mappings people write: config overrides and a site's AFID table file.

A malformed one names the key and the line; at start-up it is a config error naming
``health.afid_table``; a judge whose file goes bad keeps its last good table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from structlog.testing import capture_logs

from exporter import action_file
from exporter.config import load_config
from exporter.config.health import ActionEntry, HealthConfig
from exporter.errors import ConfigError
from exporter.health import HealthJudge
from exporter.model import Reading

GOOD = """\
reference: AMD SAG NPD ConfigMap, 2026-03
afids:
  "24": none
  "18":
    action: replace_device
    scope: baseboard
    detail: RMA the UBB
"""


def test_a_site_table_gives_site_table_advice(tmp_path: Path) -> None:
    path = tmp_path / "afids.yaml"
    path.write_text(GOOD)
    table = action_file.load(str(path))
    assert set(table.advice) == {"24", "18"}
    board = table.advice["18"]
    assert (board.action, board.scope, board.detail, board.provenance) == (
        "replace_device",
        "baseboard",
        "RMA the UBB",
        "site_table",
    )
    assert board.reference == f"AMD SAG NPD ConfigMap, 2026-03 ({path})"
    assert table.advice["24"].action == "none"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('afids:\n  "18": {action: replace_device, scope: board}\n', ":2: afids.18.scope: must be"),
        ('afids:\n  "18":\n    action: nuke\n', ":3: afids.18.action: must be one of"),
        ('afids:\n  "18": reboot\n', ":2: afids.18: must be one of"),
        ('afids:\n  "18": {acton: none}\n', ":2: afids.18.acton: unknown key"),
        ('afids:\n  "18": {scope: node}\n', ":2: afids.18: needs an action"),
        ("afids:\n  xgmi: none\n", ":2: afids.xgmi: is not an AFID"),
        ('afids:\n  "18": none\n  "018": none\n', ":3: afids.18: key given twice"),
        ("afidz: {}\n", ":1: afidz: unknown key"),
        ("afids: [18]\n", ":1: afids: must be a mapping"),
        ('afids:\n  "18": [none\n', ":3:1: invalid YAML"),
        ("- 1\n", ":1: must be a mapping"),
    ],
)
def test_a_malformed_table_names_the_key_and_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "afids.yaml"
    path.write_text(text)
    with pytest.raises(action_file.ActionFileError) as bad:
        action_file.load(str(path))
    assert str(bad.value).startswith(str(path))
    assert problem in str(bad.value)


def config_file(tmp_path: Path, health: dict[str, object]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"health": health}))
    return str(path)


def test_at_start_up_a_bad_table_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    table = tmp_path / "afids.yaml"
    table.write_text('afids:\n  "18": {action: replace_device, scope: board}\n')
    path = config_file(tmp_path, {"afid_table": str(table)})
    with pytest.raises(ConfigError) as bad:
        load_config(path, env={})
    (problem,) = bad.value.problems
    assert f"{path}:2: health.afid_table: {table}:2: afids.18.scope" in problem


def test_overrides_take_a_word_or_the_entry_written_out(tmp_path: Path) -> None:
    entry = {"action": "inspect_hardware", "scope": "baseboard", "escalation": "replace_device"}
    path = config_file(tmp_path, {"afid_actions": {"18": entry, "24": "none"}})
    health = load_config(path, env={}).health
    assert health.afid_actions["18"] == ActionEntry(
        "inspect_hardware", "baseboard", "replace_device"
    )
    advice = health.afid_advice()
    assert (advice["18"].scope, advice["18"].provenance) == ("baseboard", "config")
    assert (advice["24"].action, advice["24"].provenance) == ("none", "config")


@pytest.mark.parametrize(
    ("health", "problem"),
    [
        ({"afid_actions": {"18": {"action": "none", "scope": "rack"}}}, "afid_actions.18.scope"),
        ({"afid_actions": {"18": "nuke"}}, "afid_actions.18: must be one of"),
        ({"xid_actions": {"79": {"action": "reboot_node", "escalation": "x"}}}, "79.escalation"),
        ({"xid_actions": {"x": "none"}}, "xid_actions.x: is not a code"),
    ],
)
def test_a_bad_override_names_its_key_and_line(tmp_path: Path, health, problem) -> None:
    path = config_file(tmp_path, health)
    with pytest.raises(ConfigError) as bad:
        load_config(path, env={})
    assert any(p.startswith(f"{path}:") and problem in p for p in bad.value.problems), bad.value


def test_an_xid_override_written_out_keeps_its_scope_escalation_and_detail() -> None:
    entry = ActionEntry("reboot_node", "node", "contact_vendor", "", "drain first")
    judge = HealthJudge.configured(HealthConfig(xid_actions={"74": entry}))
    judge.wall, judge.clock, judge.boot_time = (lambda: NOW), (lambda: 0.0), (lambda: 0.0)
    readings = [
        Reading("accel_device_up", A, 1.0),
        Reading("accel_device_up", B, 1.0),
        Reading("accel_xid_errors_total", (*A, "74"), 1.0),
        Reading("accel_xid_last_timestamp_seconds", (*A, "74"), NOW - 1),
    ]
    got = {r.uuid: r for r in judge.judge(readings)}["GPU-a"]
    (finding,) = got.findings
    assert (got.action, got.scope, got.scope_uuids) == ("reboot_node", "node", ("GPU-a", "GPU-b"))
    assert (finding.escalation, finding.detail) == ("contact_vendor", "drain first")
    assert (finding.provenance, finding.reference) == ("config", "health.xid_actions")


NOW = 1_800_000_000.0
A = ("0", "GPU-a")
B = ("1", "GPU-b")


def afid18() -> list[Reading]:
    return [
        Reading("accel_device_up", A, 1.0),
        Reading("accel_amd_afid_errors_total", (*A, "18", "fatal"), 1.0),
        Reading("accel_amd_afid_last_timestamp_seconds", (*A, "18"), NOW - 10),
    ]


def test_a_judge_keeps_its_last_good_table_when_the_file_goes_bad(tmp_path: Path) -> None:
    path = tmp_path / "afids.yaml"
    path.write_text(GOOD)
    judge = HealthJudge(clock=lambda: 0.0, wall=lambda: NOW, source="amdsmi")
    judge.reconfigure(HealthConfig(afid_table=str(path)))
    (first,) = judge.judge(afid18())
    assert (first.action, first.findings[0].provenance) == ("replace_device", "site_table")
    path.write_text('afids:\n  "18": {action: none, scope: board}\n')  # malformed
    with capture_logs() as logs:
        for _ in range(3):
            (kept,) = judge.judge(afid18())
            assert kept.findings[0].provenance == "site_table"
            assert kept.action == "replace_device"
        # A reload of the same config reads the file again: still bad, still kept.
        judge.reconfigure(HealthConfig(afid_table=str(path)))
        (kept,) = judge.judge(afid18())
        assert kept.findings[0].provenance == "site_table"
    bad = [e for e in logs if e["event"].startswith("site AFID table not loaded")]
    assert len(bad) == 1, logs  # logged once, the daemon goes on
    assert "afids.18.scope" in bad[0]["problem"] and ":2:" in bad[0]["problem"]
    path.write_text('afids:\n  "18": {action: inspect_hardware, scope: node}\n')
    (fixed,) = judge.judge(afid18())
    assert (fixed.action, fixed.scope) == ("inspect_hardware", "node")
    # The table dropped from the config: the built-in (inferred) row again.
    judge.reconfigure(HealthConfig())
    (built_in,) = judge.judge(afid18())
    assert (built_in.action, built_in.findings[0].provenance) == (
        "inspect_hardware",
        "vendor_inferred",
    )
