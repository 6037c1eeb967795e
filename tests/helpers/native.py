"""Compile a fake native library from C with gcc (never committed; built per test run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


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
