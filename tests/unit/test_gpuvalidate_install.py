"""gpu-validate's install plan: which wheels the GPU machine lacks, from pyproject.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.gpuvalidate.phase_install import (
    PREINSTALLED,
    TARGET,
    missing,
    project_name,
    requirements,
    wheel_project,
)

ROOT = Path(__file__).parents[2]
tomllib = pytest.importorskip("tomllib", reason="--fetch-wheels reads pyproject with Python 3.11+")


def test_project_names_are_normalised():
    assert project_name("prometheus_client>=0.20") == "prometheus-client"
    assert project_name("PyYAML>=6.0") == "pyyaml"
    assert project_name("nvidia-ml-py==13.615.*") == "nvidia-ml-py"
    assert wheel_project(Path("PyYAML-6.0.2-cp312-cp312-manylinux_2_17_x86_64.whl")) == "pyyaml"
    assert wheel_project(Path("structlog-25.4.0-py3-none-any.whl")) == "structlog"


def test_the_wheels_to_carry_are_what_pyproject_needs_less_what_the_machine_has():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = requirements(pyproject)
    names = {project_name(r) for r in reqs}
    # Build backend, runtime, and the nvidia and cuda extras; not the dev tools.
    assert {"setuptools", "structlog", "nvidia-ml-py", "cuda-bindings"} <= names
    assert "pytest" not in names and "amdsmi" not in names
    carried = {project_name(r) for r in missing(reqs)}
    assert carried == names - PREINSTALLED
    assert not carried & {"prometheus-client", "pyyaml", "nvidia-ml-py", "cuda-bindings"}
    assert {"structlog", "bcrypt", "setuptools", "wheel"} <= carried


def test_the_download_targets_cp312_manylinux_x86_64_binaries_only():
    args = " ".join(TARGET)
    assert "--only-binary=:all:" in args
    assert "--python-version 3.12" in args and "--abi cp312" in args
    assert "--platform manylinux2014_x86_64" in args
