"""Check ergonomics (newcomer-4 F19): the temperature check's default thresholds, and
``check --help`` naming the options every check takes."""

from __future__ import annotations

import pytest

from exporter.checks.command import TEMPERATURE_DEFAULTS
from exporter.cli import main
from tests.helpers.metrics_server import MetricsServer
from tests.unit.test_checks import TWO, U0, U1, temp


@pytest.fixture
def server():
    with MetricsServer() as s:
        yield s


def test_gpu_temperature_has_default_thresholds(server, capsys):
    warn, crit = TEMPERATURE_DEFAULTS["gpu"]
    cases = [(warn, 0), (warn + 1, 1), (crit + 1, 2)]
    for hottest, code in cases:
        server.body = TWO + temp("0", U0, 40) + temp("1", U1, hottest)
        assert main(["check", "temperature", "--url", server.url]) == code
        out = capsys.readouterr().out
        assert f"gpu1_gpu={hottest:g};{warn:g};{crit:g}" in out, out


def test_one_threshold_given_keeps_the_pair_consistent(server, capsys):
    server.body = TWO + temp("0", U0, 96) + temp("1", U1, 40)
    assert main(["check", "temperature", "--warn", "95", "--url", server.url]) == 1
    assert "gpu0_gpu=96;95;100" in capsys.readouterr().out
    server.body = TWO + temp("0", U0, 71) + temp("1", U1, 40)
    assert main(["check", "temperature", "--crit", "75", "--url", server.url]) == 1
    assert "gpu0_gpu=71;70;75" in capsys.readouterr().out


def test_other_sensors_need_their_thresholds(server, capsys):
    server.body = TWO + temp("0", U0, 96, "hotspot")
    assert main(["check", "temperature", "--sensor", "hotspot", "--url", server.url]) == 3
    assert "give --warn and --crit for the hotspot sensor" in capsys.readouterr().out
    args = ["--sensor", "hotspot", "--warn", "100", "--crit", "110"]
    assert main(["check", "temperature", *args, "--url", server.url]) == 0


def test_check_help_names_the_shared_options(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert "options of every check" in out
    for flag in ("--url URL", "--local", "--timeout", "--basic-auth-file", "--exit-codes"):
        assert flag in out, out
