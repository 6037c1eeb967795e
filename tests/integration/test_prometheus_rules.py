"""The shipped alerting and recording rules: valid, unit-tested, documented."""

from __future__ import annotations

import re
import subprocess

import yaml

from exporter.catalog.nvidia import CRITICAL_XIDS
from tests.helpers.deploy import REPO, RULE_FILES, RULES_DIR, all_rules, need, rule_docs
from tests.helpers.promql import metric_names

PROMTOOL_HINT = "apt-get install prometheus"
TESTS = sorted((RULES_DIR / "tests").glob("*_test.yaml"))
SEVERITIES = {"critical", "warning"}

# The alerts the issue asks for, by what they cover.
REQUIRED_ALERTS = {
    "exporter down": "AccelExporterDown",
    "exporter stale": "AccelExporterStale",
    "source down": "AccelExporterSourceDown",
    "GPU missing versus expected count": "AccelGpuMissing",
    "GPU fallen off the bus": "AccelGpuFallenOffBus",
    "critical XIDs": "AccelCriticalXid",
    "uncorrectable ECC": "AccelEccUncorrectable",
    "row-remap failure": "AccelRowRemapFailure",
    "row-remap pending": "AccelRowRemapPending",
    "thermal throttling": "AccelThermalThrottling",
    "power throttling": "AccelPowerThrottling",
    "temperature high": "AccelTemperatureHigh",
    "NCCL/RCCL job degraded": "AccelCclJobDegraded",
    "NCCL/RCCL job stalled": "AccelCclJobStalled",
    "dead ranks": "AccelCclDeadRanks",
    "persistent straggler": "AccelCclPersistentStraggler",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [need("promtool", PROMTOOL_HINT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def alerts() -> dict[str, dict]:
    return {rule["alert"]: rule for rule in all_rules() if "alert" in rule}


def test_promtool_check_rules_accepts_every_rule_file() -> None:
    result = promtool("check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(RULE_FILES)


def test_group_names_are_unique_across_files() -> None:
    # The chart and kustomize put every group into one PrometheusRule, i.e. one rule file.
    names = [group["name"] for doc in rule_docs() for group in doc["groups"]]
    assert len(names) == len(set(names))


def test_promtool_unit_tests_pass() -> None:
    assert TESTS, "no promtool unit tests found"
    result = promtool("test", "rules", *map(str, TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_unit_tests_cover_every_alert_firing_and_not_firing() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for path in TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    names = set(alerts())
    assert names - firing == set(), "alerts never shown firing"
    assert names - silent == set(), "alerts never shown not firing"


def test_unit_tests_cover_every_recording_rule() -> None:
    recorded = {rule["record"] for rule in all_rules() if "record" in rule}
    tested = set()
    for path in TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("promql_expr_test", []):
                tested |= metric_names(case["expr"]) & recorded
    assert recorded - tested == set()


def test_every_required_alert_exists() -> None:
    missing = {what: name for what, name in REQUIRED_ALERTS.items() if name not in alerts()}
    assert missing == {}


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    for name, rule in alerts().items():
        assert name.startswith("Accel"), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}, name
        assert all(text.strip().endswith(".") for text in annotations.values()), name
        # A runbook says what to do, not only what happened.
        assert len(annotations["runbook"].split()) >= 25, name


def test_critical_xids_alert_on_a_recent_last_seen_timestamp_not_on_a_counter() -> None:
    for name in ("AccelCriticalXid", "AccelGpuFallenOffBus"):
        expr = alerts()[name]["expr"]
        assert "accel_xid_last_timestamp_seconds" in expr
        assert "time()" in expr
        assert "accel_xid_errors_total" not in expr and "increase(" not in expr


def xids_in(expr: str) -> set[int]:
    """The XID codes an expression selects with xid="N" or xid=~"A|B|..."."""
    found: set[int] = set()
    for match in re.finditer(r'xid=~?"([0-9|]+)"', expr):
        found.update(int(code) for code in match.group(1).split("|"))
    return found


def test_every_critical_xid_pages_through_exactly_one_alert() -> None:
    # One list (exporter/catalog/nvidia.py) for `check xid` and the alerts: 79 has its
    # own alert (it also covers a lost GPU without the XID), the rest AccelCriticalXid.
    critical = xids_in(alerts()["AccelCriticalXid"]["expr"])
    off_the_bus = xids_in(alerts()["AccelGpuFallenOffBus"]["expr"])
    assert off_the_bus == {79}
    assert not critical & off_the_bus
    assert critical | off_the_bus == CRITICAL_XIDS


def test_alert_names_are_documented() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    assert [name for name in alerts() if name not in doc] == []
