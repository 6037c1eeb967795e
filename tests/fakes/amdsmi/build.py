"""Build the fake ``libamd_smi.so`` with gcc: ``<root>/lib/libamd_smi.so``, found via ROCM_PATH.

The chicken-and-egg: the C types are generated from the installed wrapper's
ctypes classes, but importing the wrapper needs a ``libamd_smi.so``. So:

1. ``gen_stubs.py`` reads the wrapper as text and writes a weak stub for every
   symbol it binds;
2. the stubs alone are compiled into a throw-away library;
3. ``gen_header.py`` imports the wrapper through that library (in a
   subprocess, because the wrapper binds its library once per process) and
   writes ``amdsmi_types.h`` with packed typedefs and ``_Static_assert``s;
4. stubs + ``fake_amdsmi.c`` are compiled against that header; the real
   functions override the weak stubs.

Usage: ``python tests/fakes/amdsmi/build.py OUTDIR`` prints the root to use as ROCM_PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CFLAGS = ["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-pthread"]


class BuildError(RuntimeError):
    """gcc or a generator failed; the message carries its output."""


def _run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if result.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")


def env_for(
    root: Path, base: dict[str, str] | None = None, *, rocm_home: bool = True
) -> dict[str, str]:
    """An environment in which ``import amdsmi`` loads the library under ``root``.

    The wrapper prefers ROCM_HOME over ROCM_PATH, so by default both point at the
    root (a ROCM_HOME inherited from the caller could point elsewhere). With
    ``rocm_home=False`` only ROCM_PATH is set and ROCM_HOME removed, as on a node
    whose ROCm install sets just that.
    """
    env = dict(os.environ if base is None else base)
    env["ROCM_PATH"] = str(root)
    if rocm_home:
        env["ROCM_HOME"] = str(root)
    else:
        env.pop("ROCM_HOME", None)
    return env


def build(out: Path) -> Path:
    """Build into ``out``; returns the root directory holding ``lib/libamd_smi.so``."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError("gcc is required to build the fake libamd_smi.so")
    work = out / "build"
    stub_root = out / "stub-root"
    root = out / "root"
    for d in (work, stub_root / "lib", root / "lib"):
        d.mkdir(parents=True, exist_ok=True)
    stubs = work / "stubs.c"
    _run([sys.executable, str(HERE / "gen_stubs.py"), str(stubs)])
    _run([gcc, *CFLAGS, "-shared", "-o", str(stub_root / "lib" / "libamd_smi.so"), str(stubs)])
    header = work / "amdsmi_types.h"
    _run([sys.executable, str(HERE / "gen_header.py"), str(header)], env=env_for(stub_root))
    _run(
        [
            gcc,
            *CFLAGS,
            "-shared",
            "-Wl,-soname,libamd_smi.so",
            f"-I{work}",
            f"-I{HERE}",
            "-o",
            str(root / "lib" / "libamd_smi.so"),
            str(stubs),
            str(HERE / "fake_amdsmi.c"),
        ]
    )
    return root


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
