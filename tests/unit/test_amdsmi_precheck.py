"""The daemon's check for libamd_smi.so before it starts an amdsmi worker (Vendor.precheck)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from exporter.config import load_config
from exporter.host import libsearch
from exporter.sources.device import DeviceSource
from exporter.sources.registry import FACTORIES

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("amdsmi") is None, reason="the amd extra is not installed"
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # Nothing inherited: no LD_LIBRARY_PATH, ROCM_* of the machine running the tests.
    return {
        "LD_LIBRARY_PATH": str(tmp_path / "empty"),
        "ROCM_PATH": str(tmp_path / "none"),
        **extra,
    }


def test_absent_library_names_the_places_looked(tmp_path: Path) -> None:
    if libsearch.cached_paths("libamd_smi.so") or any(
        Path(d, "libamd_smi.so").exists() for d in libsearch.DEFAULT_DIRS
    ):
        pytest.skip("this machine has a libamd_smi.so")
    absent = libsearch.amdsmi_absent(_env(tmp_path))
    assert absent is not None
    reason, detail = absent
    assert reason == "library_not_found"
    assert str(tmp_path / "none" / "lib" / "libamd_smi.so") in detail


def test_a_library_under_rocm_home_lets_the_worker_start(tmp_path: Path) -> None:
    lib = tmp_path / "rocm" / "lib"
    lib.mkdir(parents=True)
    (lib / "libamd_smi.so").write_bytes(b"")
    assert libsearch.amdsmi_absent(_env(tmp_path, ROCM_HOME=str(tmp_path / "rocm"))) is None


def test_the_amdsmi_source_starts_no_worker_without_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if libsearch.cached_paths("libamd_smi.so"):
        pytest.skip("this machine has a libamd_smi.so")
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ROCM_HOME", raising=False)
    source = FACTORIES["amdsmi"](load_config(None, env={}))
    assert isinstance(source, DeviceSource)
    why = source._cannot_start()
    assert why is not None and why[0] == "library_not_found"
    lib = tmp_path / "none" / "lib"
    lib.mkdir(parents=True)
    (lib / "libamd_smi.so").write_bytes(b"")
    assert source._cannot_start() is None
