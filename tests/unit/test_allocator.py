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


def _python(code: str, *args: str) -> str:
    # In a process of its own: mallopt changes the allocator of the process that calls it.
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def _configure(env: dict[str, str]) -> dict[str, int]:
    code = (
        "import json, sys; from exporter import allocator; "
        "print(json.dumps(allocator.configure(json.loads(sys.argv[1]))))"
    )
    return dict(json.loads(_python(code, json.dumps(env))))


def test_both_settings_are_applied_by_default() -> None:
    assert _configure({}) == {"MALLOC_ARENA_MAX": 2, "MALLOC_MMAP_THRESHOLD_": 128 * 1024}


def test_a_setting_the_environment_chooses_is_left_to_glibc() -> None:
    assert _configure({"MALLOC_ARENA_MAX": "4"}) == {"MALLOC_MMAP_THRESHOLD_": 128 * 1024}
    assert _configure({"MALLOC_ARENA_MAX": "4", "MALLOC_MMAP_THRESHOLD_": "65536"}) == {}


def test_trim_gives_freed_heap_pages_back_once_configured() -> None:
    # Scattered small blocks, most freed: their pages stay resident until trimmed.
    code = (
        "from exporter import allocator\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS'))"
        ".split()[1])\n"
        "allocator.trim()  # before configure: nothing to call, nothing raised\n"
        "allocator.configure({})\n"
        "keep, junk = [], []\n"
        "for i in range(200_000):\n"
        "    (keep if i % 64 == 0 else junk).append(bytearray(600))\n"
        "del junk\n"
        "before = rss(); allocator.trim(); print(before - rss())\n"
    )
    out = _python(code)
    assert int(out) > 10_000  # KiB: most of the ~120 MiB freed went back
