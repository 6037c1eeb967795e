"""deploy/npd's Node Problem Detector custom-plugin config: well formed, and every rule's
command is a real ``accel-exporter check`` that answers NPD's 0/1/2."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.verdict import UNKNOWN
from tests.helpers.metrics_server import MetricsServer
from tests.unit.test_checks import U0, U1, doc, health

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "npd" / "accel-exporter-monitor.json"
URL = "http://${NODE_IP:-127.0.0.1}:9842"


@pytest.fixture(scope="module")
def server() -> Iterator[MetricsServer]:
    with MetricsServer() as s:
        yield s


def rules() -> list[dict[str, object]]:
    config = json.loads(CONFIG.read_text())
    assert config["plugin"] == "custom" and config["source"] == "accel-exporter"
    conditions = {c["type"] for c in config["conditions"]}
    for rule in config["rules"]:
        assert rule["type"] in ("temporary", "permanent")
        if rule["type"] == "permanent":
            assert rule["condition"] in conditions
        assert rule["path"] == "/bin/sh" and rule["args"][0] == "-c"
    return list(config["rules"])


def argv(rule: dict[str, object], url: str) -> list[str]:
    """The rule's command line, as NPD's shell would run it, pointed at ``url``."""
    command = rule["args"][1]  # type: ignore[index]
    assert command.startswith("exec accel-exporter check ") and URL in command
    words = shlex.split(command.replace(URL, url))
    assert "--exit-codes" in words and words[words.index("--exit-codes") + 1] == "npd"
    return words[2:]


def test_every_rule_is_a_check_with_npd_exit_codes(server: MetricsServer, capsys) -> None:
    failed = doc(health("0", U0, "ok"), health("1", U1, "failed", "xid_79"))
    ok = doc(health("0", U0, "ok"), health("1", U1, "ok"))
    unknown = doc(health("0", U0, UNKNOWN, why="worker starting"), source_state="pending")
    by_reason = {rule["reason"]: argv(rule, server.url) for rule in rules()}
    assert set(by_reason) == {
        "AcceleratorUnhealthy",
        "AcceleratorExporterDown",
        "AcceleratorXidError",
        "AcceleratorAfidError",
    }
    server.body = failed
    assert main(by_reason["AcceleratorUnhealthy"]) == 1  # NPD: a problem
    server.body = ok
    assert main(by_reason["AcceleratorUnhealthy"]) == 0
    server.body = unknown  # the exporter's worker starting: NPD's unknown, not a problem
    assert main(by_reason["AcceleratorUnhealthy"]) == 2
    for words in by_reason.values():  # each parses and answers 0, 1 or 2, never 3 or a crash
        assert main(words) in (0, 1, 2)
    unreachable = argv(rules()[0], "http://127.0.0.1:1")
    assert main(unreachable) == 2  # NPD: unknown, not a problem
    out = capsys.readouterr().out
    assert "Traceback" not in out
