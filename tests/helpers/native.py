"""Compile a fake native library from C with gcc (never committed; built per test run)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

# A directory shared by every process of one test run (tests/conftest.py makes it in
# the controlling process before pytest-xdist starts its workers, which inherit it).
# Unset (a benchmark, a script), each build goes where its caller says.
BUILDS_ENV = "ACCEL_TEST_FAKE_BUILDS"
_DONE = ".built"


def built_once(name: str, build: Callable[[Path], Path], dest: Path) -> Path:
    """``build(directory)`` once per test run, shared by all its xdist workers; its result.

    Each worker used to compile every fake for itself (gcc and the amdsmi header
    generator: tens of CPU seconds per run on a 2-core CI machine). The first caller
    builds under an exclusive lock; the others wait on that lock and reuse the result.
    A build that failed leaves no marker, so the next caller builds again (and fails
    loudly in its own test). Without a shared directory, ``build(dest)``.
    """
    shared = os.environ.get(BUILDS_ENV)
    if not shared:
        return build(dest)
    root = Path(shared)
    where = root / name
    done = where / _DONE
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(where, ignore_errors=True)
            result = build(where)
            done.write_text(str(result.relative_to(where)))
    return where / done.read_text()


def compile_shared(source: Path, soname: str, out_dir: Path) -> Path:
    """``gcc -shared`` ``source`` into ``out_dir/soname`` with that SONAME; fails loudly."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError(
            "gcc is required to build the fake vendor libraries (apt-get install gcc)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / soname
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            f"-Wl,-soname,{soname}",
            "-o",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target
