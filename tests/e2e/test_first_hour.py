"""What a new user meets in the first hour: CLI answers that are short, honest and usable."""

from __future__ import annotations

import json
import re
import sys

from tests.helpers.cli import REPO, record, run_cli

# Only the host source: no vendor library on a CI machine, no RAS or Inspector jobs.
HOST_ONLY = [
    f"--sources.{name}.enabled=false"
    for name in ("nvml", "amdsmi", "tpu", "neuron", "ccl_ras", "ccl_inspector", "fabric")
] + ["--workload.enabled=false"]
# The same as environment variables (a check's own flags follow its name; config comes
# from --config.file or the environment).
HOST_ONLY_ENV = {
    "ACCEL_EXPORTER_" + flag[2:].split("=")[0].replace(".", "__").upper(): "false"
    for flag in HOST_ONLY
}


def test_config_show_round_trips_through_config_check():
    shown = run_cli("config", "show")
    assert shown.returncode == 0, shown.stderr
    checked = run_cli_stdin(["config", "check", "-"], shown.stdout)
    assert checked.returncode == 0, checked.stderr
    # With optional sections set, too (null sections must read back as unset).
    shown = run_cli("config", "show", "--sources.nvml.expected-devices", "8")
    assert "expected_devices: 8" in shown.stdout
    assert run_cli_stdin(["config", "check", "-"], shown.stdout).returncode == 0


def run_cli_stdin(args, text):
    import subprocess

    from tests.helpers.cli import REPO, cli_command, cli_env

    return subprocess.run(
        cli_command(*args), input=text, env=cli_env(), capture_output=True, text=True, cwd=REPO
    )


def test_record_to_an_unwritable_directory_exits_2_with_one_line(tmp_path):
    result = record("/proc/x", "true")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "cannot write to --out /proc/x" in result.stderr
    assert "Traceback" not in result.stderr


def test_record_says_when_it_found_no_device(tmp_path):
    result = record(tmp_path / "run", "true")
    assert result.returncode == 0, result.stderr
    assert "no accelerator found" in result.stderr


def test_an_unknown_command_is_a_short_error():
    result = run_cli("nonsense")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) <= 4, result.stderr
    assert "invalid choice: 'nonsense'" in result.stderr


def test_probe_exits_1_when_a_source_errors():
    ok = run_cli("probe", *HOST_ONLY)
    assert ok.returncode == 0, ok.stdout
    # Switched on explicitly, a missing library is an error, not "unavailable here".
    failing = run_cli("probe", *HOST_ONLY, "--sources.nvml.enabled=true")
    assert failing.returncode == 1, failing.stdout
    assert re.search(r"^nvml\s+on\s+error", failing.stdout, re.M), failing.stdout


def test_once_json_names_its_labels():
    result = run_cli("once", "--format", "json", *HOST_ONLY)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    cpu = [r for r in doc["host"]["readings"] if r["metric"] == "accel_host_cpu_seconds_total"]
    assert cpu and all(isinstance(r["labels"], dict) for r in cpu)
    assert {"mode"} <= set(cpu[0]["labels"])
    documented = (REPO / "docs" / "cli.md").read_text()
    for key in doc["host"]:
        assert f"| `{key}` |" in documented, key
    assert set(doc["host"]) == {
        "ok",
        "unavailable",
        "reason",
        "detail",
        "duration_seconds",
        "readings",
    }


def test_check_xid_without_nvml_is_unknown_and_claims_no_window():
    result = run_cli("check", "xid", "--local", env=HOST_ONLY_ENV)
    assert result.returncode == 3, result.stdout
    assert result.stdout.startswith("XID UNKNOWN")
    assert "60m" not in result.stdout and "last" not in result.stdout


def test_check_exporter_local_polls_here_not_the_url():
    result = run_cli(
        "check", "exporter", "--local", "--url", "http://127.0.0.1:1", env=HOST_ONLY_ENV
    )
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith("EXPORTER OK - 1 of 1 sources up"), result.stdout


def test_status_times_are_also_rfc3339_and_the_server_header_hides_python(daemon_factory):
    d = daemon_factory()
    d.wait_for(lambda: d.status()["sources"]["host"]["last_success"], what="a host poll")
    resp = d.get("/status")
    status = resp.json()
    stamp = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$"
    assert isinstance(status["started_at"], float)
    assert re.match(stamp, status["started_at_rfc3339"])
    host = status["sources"]["host"]
    assert re.match(stamp, host["last_success_rfc3339"]) and re.match(
        stamp, host["next_poll_rfc3339"]
    )
    server = resp.headers["Server"]
    assert server.startswith("accel-exporter/") and "Python" not in server, server
    assert sys.version.split()[0] not in server
