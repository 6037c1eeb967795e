"""Phase 1: install the project from the checkout and the carried wheels, offline.

The GPU machine already has torch, nvidia-ml-py, cuda-bindings, prometheus-client,
pyyaml, protobuf and grpcio; the rest of what ``accel-exporter[nvidia,cuda]`` and
its build need travels as wheels (``--fetch-wheels``, run beforehand on a machine
with network). The venv sees the system's packages, so nothing preinstalled is
installed twice.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from .phases import Kit, Skip
from .report import Phase

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".gpu-wheels"
EXTRAS = ("nvidia", "cuda")
# What the GPU machine has (the issue that asked for this kit lists it).
PREINSTALLED = frozenset(
    {"torch", "nvidia-ml-py", "cuda-bindings", "prometheus-client", "pyyaml", "protobuf", "grpcio"}
)
TARGET = (
    "--only-binary=:all:",
    "--implementation",
    "cp",
    "--python-version",
    "3.12",
    "--abi",
    "cp312",
    "--abi",
    "abi3",
    "--abi",
    "none",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
)


def project_name(requirement: str) -> str:
    """The normalised project name of a requirement string (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match[1]).lower()


def requirements(pyproject: dict[str, object], extras: Iterable[str] = EXTRAS) -> list[str]:
    """Build requirements, runtime dependencies and ``extras`` of a parsed pyproject."""
    build = pyproject.get("build-system", {})
    project = pyproject.get("project", {})
    assert isinstance(build, dict) and isinstance(project, dict)
    out = list(build.get("requires", []))
    out += list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        out += list(optional.get(extra, []))
    return out


def missing(reqs: Iterable[str], have: Iterable[str] = PREINSTALLED) -> list[str]:
    """The requirements whose project is not among ``have``."""
    present = {project_name(h) for h in have}
    return [r for r in reqs if project_name(r) not in present]


def wheel_project(path: Path) -> str:
    """The normalised project name of a wheel file."""
    return re.sub(r"[-_.]+", "-", path.name.split("-", 1)[0]).lower()


def fetch_wheels(dest: Path) -> int:
    """``pip download`` what the GPU machine lacks into ``dest``; pip's exit status."""
    try:
        tomllib = importlib.import_module("tomllib")
    except ModuleNotFoundError:
        print("--fetch-wheels needs Python 3.11+ (tomllib)", file=sys.stderr)
        return 2
    wanted = missing(requirements(tomllib.loads((ROOT / "pyproject.toml").read_text())))
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--dest", str(dest), *TARGET, *wanted]
    print("+", " ".join(cmd), file=sys.stderr)
    status = subprocess.call(cmd)
    # Dependencies of what was asked for that the machine already has are not carried.
    for wheel in dest.glob("*.whl"):
        if wheel_project(wheel) in PREINSTALLED:
            wheel.unlink()
    print(f"wheels in {dest}: " + ", ".join(sorted(w.name for w in dest.glob("*.whl"))))
    return status


def _pip(kit: Kit, venv_python: Path, base: str) -> list[str]:
    """How to run pip for the venv: its own, else the base interpreter's pointed at it."""
    if (venv_python.parent / "pip").exists():
        return [str(venv_python), "-m", "pip"]
    return [base, "-m", "pip", "--python", str(venv_python)]


def install(kit: Kit, phase: Phase, wheels: Path, base: str) -> None:
    """Create ``out/work/venv`` (system site packages visible) and install the checkout."""
    if not wheels.is_dir():
        raise RuntimeError(
            f"no wheel folder {wheels}: run scripts/gpu-validate --fetch-wheels {wheels} "
            "on a machine with network and carry it with the checkout"
        )
    venv = kit.work / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        made = subprocess.run(
            [base, "-m", "venv", "--system-site-packages", str(venv)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if made.returncode != 0:  # no ensurepip on this Python: a venv without pip
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run(
                [base, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                check=True,
                capture_output=True,
                timeout=120,
            )
    cmd = [
        *_pip(kit, python, base),
        "install",
        "--no-index",
        "--find-links",
        str(wheels),
        "--disable-pip-version-check",
        "--no-cache-dir",
        f"{ROOT}[{','.join(EXTRAS)}]",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (kit.work / "install.log").write_text(" ".join(cmd) + "\n" + done.stdout + done.stderr)
    phase.figures["wheels"] = sorted(w.name for w in wheels.glob("*.whl"))
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise RuntimeError("pip install failed: " + " | ".join(tail))
    kit.python = str(python)


def verify(kit: Kit, phase: Phase) -> bool:
    """The interpreter imports the exporter and the NVIDIA binding."""
    done = subprocess.run(
        [kit.python, "-c", "import exporter, pynvml; print(exporter.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=kit.work,
    )
    ok = done.returncode == 0
    said = (done.stdout + done.stderr).strip().splitlines()
    phase.figures["exporter_imported_from"] = said[-1] if said else ""
    return phase.check("exporter and pynvml import", ok, seen=said[-1:] or None)


def run_phase(kit: Kit, phase: Phase, *, given: bool, wheels: Path, base: str) -> None:
    """Install unless an interpreter was given (``--python``), then verify."""
    if given:
        if not verify(kit, phase):
            raise RuntimeError(f"{kit.python} cannot import the exporter and pynvml")
        raise Skip(f"--python {kit.python}: using the project installed there")
    install(kit, phase, wheels, base)
    verify(kit, phase)
