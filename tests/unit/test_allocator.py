"""The daemon's glibc malloc settings: applied unless the environment chooses them."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


def _configure(env: dict[str, str]) -> dict[str, int]:
    # In a process of its own: mallopt changes the allocator of the process that calls it.
    code = (
        "import json, sys; from exporter import allocator; "
        "print(json.dumps(allocator.configure(json.loads(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(env)],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return dict(json.loads(out))


def test_both_settings_are_applied_by_default() -> None:
    assert _configure({}) == {"MALLOC_ARENA_MAX": 2, "MALLOC_MMAP_THRESHOLD_": 128 * 1024}


def test_a_setting_the_environment_chooses_is_left_to_glibc() -> None:
    assert _configure({"MALLOC_ARENA_MAX": "4"}) == {"MALLOC_MMAP_THRESHOLD_": 128 * 1024}
    assert _configure({"MALLOC_ARENA_MAX": "4", "MALLOC_MMAP_THRESHOLD_": "65536"}) == {}
