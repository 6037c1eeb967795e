"""Command line and configuration errors, as an operator meets them."""

from __future__ import annotations

import socket
import time

import pytest

from tests.helpers.cli import run_cli as cli
from tests.helpers.daemon import value

THREE_MISTAKES = """\
web:
  listen_address: ":70000"
sources:
  host:
    interval: 50ms
    intreval: 5s
"""


def test_three_mistakes_exit_2_and_all_are_named(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(THREE_MISTAKES)
    for args in (["--config.file", str(cfg)], ["config", "check", str(cfg)]):
        result = cli(*args)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 3, result.stderr
        assert f"{cfg}:2: web.listen_address: invalid port '70000'" in result.stderr
        assert f"{cfg}:5: sources.host.interval: must be at least 100ms" in result.stderr
        assert (
            f"{cfg}:6: sources.host.intreval: unknown key (did you mean 'interval'?)"
            in result.stderr
        )
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("web: [1, 2", "invalid YAML"),
        ("sources:\n  host:\n    interval: -5s\n", "sources.host.interval: negative duration"),
        ("sources:\n  host:\n    interval: 5\n", "needs a unit"),
        ("sources:\n  host:\n    enabled: maybe\n", "sources.host.enabled: must be"),
        ("log:\n  level: 3\n", "log.level: must be one of"),
        (
            "web:\n  tls:\n    cert_file: /nonexistent.pem\n    key_file: /nonexistent.key\n",
            "web.tls.cert_file: cannot read file '/nonexistent.pem'",
        ),
        ("- a\n- b\n", "must be a mapping of sections"),
        (
            "web:\n  basic_auth:\n    users:\n      alice: hunter2\n",
            "web.basic_auth.users.alice: is not a bcrypt hash",
        ),
    ],
)
def test_bad_config_gets_one_clear_line(tmp_path, text, expected):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    result = cli("--config.file", str(cfg), "config", "show")
    assert result.returncode == 2
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr


def test_unreadable_config_file(tmp_path):
    result = cli("--config.file", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert "cannot read config file" in result.stderr and "Traceback" not in result.stderr


def test_env_and_flags_override_file_and_name_their_origin(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sources:\n  host:\n    interval: 10s\n")
    shown = cli(
        "--config.file",
        str(cfg),
        "config",
        "show",
        env={"ACCEL_EXPORTER_SOURCES__HOST__INTERVAL": "7s"},
    )
    assert shown.returncode == 0, shown.stderr
    assert "interval: 7s" in shown.stdout
    shown = cli(
        "--config.file",
        str(cfg),
        "--sources.host.interval",
        "3s",
        "config",
        "show",
        env={"ACCEL_EXPORTER_SOURCES__HOST__INTERVAL": "7s"},
    )
    assert "interval: 3s" in shown.stdout
    bad = cli(
        "config",
        "show",
        env={
            "ACCEL_EXPORTER_SOURCES__HOST__INTERVL": "7s",
            "ACCEL_EXPORTER_WEB__MAX_REQUESTS": "many",
        },
    )
    assert bad.returncode == 2
    assert (
        "env ACCEL_EXPORTER_SOURCES__HOST__INTERVL: unknown key sources.host.intervl" in bad.stderr
    )
    assert (
        "env ACCEL_EXPORTER_WEB__MAX_REQUESTS: web.max_requests: must be an integer" in bad.stderr
    )
    bad = cli("--sources.host.timeout", "0s", "config", "show")
    assert "flag --sources.host.timeout: sources.host.timeout: must be positive" in bad.stderr


def test_port_in_use_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("--web.listen-address", f"127.0.0.1:{port}", timeout=30)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_once_and_probe():
    assert cli("--version").stdout.strip().startswith("accel-exporter ")
    once = cli("once", "--format", "prom")
    assert once.returncode == 0, once.stderr
    assert value(once.stdout, "accel_exporter_source_up", source="host") == 1
    assert value(once.stdout, "accel_host_memory_total_bytes") > 0
    probe = cli("probe")
    assert probe.returncode == 0
    assert any(line.split()[:3] == ["host", "on", "ok"] for line in probe.stdout.splitlines())


def test_unreadable_proc_file_is_up_0_with_a_reason(daemon_factory, tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 10 0 10 100 0 0 0 0 0 0\n")
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    d = daemon_factory({"sources": {"host": {"interval": "200ms", "proc_path": str(proc)}}})
    d.wait_metric("accel_exporter_source_down_reason_info", 1, source="host", reason="read_error")
    text = d.metrics()
    assert value(text, "accel_exporter_source_up", source="host") == 0
    # What could be read is still exported.
    assert value(text, "accel_host_memory_total_bytes") == 1024000
    assert value(text, "accel_host_cpus") == 1
    assert "loadavg" in d.status()["sources"]["host"]["last_error"]
    (proc / "loadavg").write_text("0.50 0.25 0.10 1/100 42\n")
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    assert value(d.metrics(), "accel_host_load5") == 0.25


def test_sighup_reload_keeps_old_config_when_new_is_invalid(daemon_factory, tmp_path):
    d = daemon_factory({"sources": {"host": {"interval": "5s"}}})
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    d.config_file.write_text("sources:\n  host:\n    interval: fast\n    bogus: 1\n")
    d.signal(__import__("signal").SIGHUP)
    d.wait_for(
        lambda: sum(e.get("event") == "reload rejected" for e in d.events) >= 2,
        what="both problems logged",
    )
    problems = [e["problem"] for e in d.events if e.get("event") == "reload rejected"]
    assert any("sources.host.interval" in p for p in problems)
    assert any("sources.host.bogus: unknown key" in p for p in problems)
    assert d.get("/healthz").status == 200
    assert value(d.metrics(), "accel_exporter_source_up", source="host") == 1
    # A valid config is applied: the interval drops, so polls speed up.
    d.config_file.write_text("sources:\n  host:\n    interval: 200ms\n")
    d.signal(__import__("signal").SIGHUP)
    d.wait_for(lambda: any(e.get("event") == "config reloaded" for e in d.events), what="reload")
    start = d.status()["sources"]["host"]["polls"]
    time.sleep(1.5)
    assert d.status()["sources"]["host"]["polls"] >= start + 3


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--bogus"], {}),
        (["--url", "http://127.0.0.1:1"], {"ACCEL_EXPORTER_WEB__LISTEN_ADDRESS": "garbage::"}),
        (["--local"], {"ACCEL_EXPORTER_WEB__LISTEN_ADDRESS": "garbage::"}),
        (["--url", "https://127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem"], {}),
    ],
)
def test_a_check_never_exits_2_for_its_own_problems(args, env):
    # Exit 2 is CRITICAL: a Slurm prolog would drain a healthy node for a typo.
    result = cli("check", "gpu-count", "--expected", "2", *args, env=env)
    assert result.returncode == 3, (result.stdout, result.stderr)
    (line,) = result.stdout.splitlines()
    assert " UNKNOWN - " in line, line
    assert "Traceback" not in result.stderr


def test_config_errors_never_show_secrets(tmp_path):
    bad = cli(
        "config",
        "show",
        env={"ACCEL_EXPORTER_OUTPUTS__OTLP__HEADERS": "{authorization: Bearer SUPERSECRET"},
    )
    assert bad.returncode == 2
    assert "outputs.otlp.headers: cannot parse" in bad.stderr
    assert "SUPERSECRET" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    cfg = tmp_path / "c.yaml"
    cfg.write_text("web:\n  basic_auth:\n    users:\n      alice: 987654\n")
    bad = cli("--config.file", str(cfg), "config", "show")
    assert bad.returncode == 2 and "web.basic_auth.users.alice: must be a string" in bad.stderr
    assert "987654" not in bad.stderr
