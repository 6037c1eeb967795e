"""Validate an exposition with the real ``promtool check metrics`` (Debian package prometheus)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def check_metrics(text: str) -> None:
    """Fail the test unless promtool accepts ``text`` without a single complaint."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (apt-get install prometheus)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == ""
