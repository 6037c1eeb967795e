"""The daemon as a subprocess: /metrics is valid exposition and the host source is up."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers.daemon import value


def test_metrics_pass_promtool_and_host_is_up(daemon_factory):
    d = daemon_factory()
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    text = d.metrics()
    assert value(text, "accel_host_memory_total_bytes") > 0
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (apt-get install prometheus)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == ""
