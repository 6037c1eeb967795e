"""promtool (Debian package prometheus) on an exposition: ``check metrics`` (no error, no lint),
and the shipped alerts evaluated on it (none may fire)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families


def check_metrics(text: str) -> None:
    """Fail the test unless promtool accepts ``text`` without a single complaint."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (apt-get install prometheus)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0 and not output.strip(), output


RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yaml"


def _selector(name: str, labels: Mapping[str, str]) -> str:
    pairs = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{pairs}}}"


def alerts_firing(text: str, minutes: int, tmp: Path) -> str:
    """promtool's complaints when any shipped alert fires on ``text`` held ``minutes`` minutes.

    Every series of the exposition (one scrape) is held for that long on one
    instance of the shipped job, ``up`` 1, and every alert of the shipped rules
    is expected to be silent at the end: "" when none fires, else promtool's report.
    """
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (apt-get install prometheus)")
    where = {"job": "accel-exporter", "instance": "node:9842"}
    series = [{"series": _selector("up", where), "values": f"1x{minutes}"}]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {**sample.labels, **where}
            series.append(
                {"series": _selector(sample.name, labels), "values": f"{sample.value!r}x{minutes}"}
            )
    rules = yaml.safe_load(RULES.read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": f"{minutes}m", "alertname": name, "exp_alerts": []}
                    for name in names
                ],
            }
        ],
    }
    path = tmp / "quiet_test.yaml"
    path.write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr
