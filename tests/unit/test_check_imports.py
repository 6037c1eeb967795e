"""A check against a daemon imports only what it needs (issue 39: <= 150 ms a call).

Node Problem Detector and Slurm run ``accel-exporter check ...`` every interval on every
node, so what the command imports is paid thousands of times a day. The figure itself is
bench/check_latency.py's; this test guards its cause without a clock: after a real run of
the health check (a fresh interpreter, against a stand-in daemon on loopback), none of the
daemon's heavy modules is loaded.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers.cli import cli_env
from tests.helpers.metrics_server import MetricsServer
from tests.unit.test_checks import U0, U1, doc, health

# What only the daemon, the config or --local needs (each costs 10-70 ms to import).
HEAVY = (
    "asyncio",
    "structlog",
    "yaml",
    "prometheus_client",
    "exporter.config",
    "exporter.catalog",
    "exporter.actions",
    "exporter.app",
    "exporter.store",
    "exporter.outputs",
    "exporter.sources",
    "exporter.backends",
    "exporter.workers",
    "exporter.commands.flags",
)

RUN = """
import json, sys
from exporter.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:  # a usage error ends the parse
    status = exc.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def loaded_by(*argv: str) -> tuple[int, str, list[str]]:
    """(exit status, status line, modules loaded) of ``accel-exporter ARGV`` in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line, _, last = proc.stdout.strip().rpartition("\n")
    report = json.loads(last)
    return report["status"], line, report["modules"]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.fixture
def server():
    with MetricsServer() as s:
        yield s


def test_the_npd_health_check_imports_nothing_heavy(server):
    server.body = doc(health("0", U0, "ok"), health("1", U1, "ok"))
    status, line, modules = loaded_by("check", "health", "--exit-codes", "npd", "--url", server.url)
    assert (status, line) == (
        0,
        "HEALTH OK - 2 GPUs, all ok | gpu0_health=0;0;2;0 gpu1_health=0;0;2;0",
    )
    assert heavy(modules) == []


def test_a_metrics_check_imports_only_the_exposition_parser(server):
    server.body = 'accel_exporter_build_info{version="0.1.0",python="3.11"} 1\n'
    server.body += 'accel_exporter_source_up{source="host"} 1\n'
    status, line, modules = loaded_by("check", "exporter", "--url", server.url)
    assert status == 0, line
    assert {m.split(".")[0] for m in heavy(modules)} == {"prometheus_client"}


def test_an_unhealthy_device_or_a_misuse_still_answers_in_full(server):
    # The heavy parts are deferred, not dropped: a device asking a person to act
    # (the action vocabulary) and a usage error (the full parser) still work.
    server.body = doc(health("0", U0, "degraded", "link_down", action="inspect_hardware"))
    status, line, modules = loaded_by("check", "health", "--url", server.url)
    assert status == 2 and line.startswith("HEALTH CRITICAL - 1 GPUs; gpu0 degraded"), line
    assert "exporter.actions" in modules
    status, line, _ = loaded_by("check", "health", "--url", server.url, "--no-such-flag")
    assert status == 3 and "unknown flag --no-such-flag" in line, line


def same(answer):
    """An answer with the measured fetch time (``scrape=0.0007s``) left out."""
    status, captured = answer
    return status, re.sub(r"scrape=[0-9.]+s", "scrape=Ts", captured.out), captured.err


def test_the_quick_path_answers_as_the_full_parser(server, capsys, monkeypatch):
    # The quick path (exporter.cli._quick_check) must print and return what the full
    # parser's path does, for every kind of check against a daemon.
    from exporter import cli
    from exporter.cli import main
    from tests.unit.test_checks import TWO, temp

    taken: list[bool] = []
    real = cli._quick_check

    def spy(words: list[str]) -> int | None:
        status = real(words)
        taken.append(status is not None)
        return status

    monkeypatch.setattr(cli, "_quick_check", spy)

    metrics = TWO + temp("0", U0, 84) + temp("1", U1, 40)
    metrics += 'accel_exporter_build_info{version="0.1.0",python="3.11"} 1\n'
    cases = [
        ("devices", ["check", "health", "--exit-codes", "npd"]),
        ("devices", ["check", "health"]),
        ("metrics", ["check", "temperature", "--warn", "80", "--crit", "90"]),
        ("metrics", ["check", "temperature"]),
        ("metrics", ["check", "xid", "--window", "10m"]),
        ("metrics", ["check", "gpu-count", "--expected", "2", "--vendor", "NVIDIA"]),
        ("metrics", ["check", "exporter", "--exit-codes=npd"]),
        ("metrics", ["check", "ccl-job"]),
    ]
    for kind, argv in cases:
        server.body = (
            doc(health("0", U0, "ok"), health("1", U1, "ok")) if kind == "devices" else metrics
        )
        taken.clear()
        quick = (main([*argv, "--url", server.url]), capsys.readouterr())
        assert taken == [True], argv  # the quick path answered
        with monkeypatch.context() as m:
            # An equal command that is not the default one: the full parser runs.
            m.setitem(cli.EXTRA_COMMANDS, "check", tuple(cli.CHECK))
            full = (main([*argv, "--url", server.url]), capsys.readouterr())
        assert same(quick) == same(full), argv
    # Unreachable: the same UNKNOWN either way.
    argv = ["check", "health", "--url", "http://127.0.0.1:1"]
    quick = (main(argv), capsys.readouterr())
    with monkeypatch.context() as m:
        m.setitem(cli.EXTRA_COMMANDS, "check", tuple(cli.CHECK))
        assert same((main(argv), capsys.readouterr())) == same(quick)
