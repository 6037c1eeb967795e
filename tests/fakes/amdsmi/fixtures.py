"""Pytest fixtures for the fake libamd_smi.so (registered in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.amdsmi import build, state
from tests.helpers.backend_harness import Backends, backends
from tests.helpers.native import built_once


@pytest.fixture(scope="session")
def amdsmi_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the fake once per session; the directory to use as ROCM_PATH."""
    return built_once("amdsmi", build.build, tmp_path_factory.mktemp("amdsmi"))


@pytest.fixture
def amdsmi_fake(tmp_path: Path) -> Iterator[state.FakeAmdSmi]:
    """A fresh 8-GPU MI300X-like state; hangs are released at teardown."""
    with state.opened(tmp_path / "amdsmi-state.bin", devices=8) as fake:
        yield fake


@pytest.fixture
def amdsmi_env(amdsmi_root: Path, amdsmi_fake: state.FakeAmdSmi) -> dict[str, str]:
    """Environment variables that point a subprocess's amdsmi at the fake."""
    return {**build.env_for(amdsmi_root, {}), **amdsmi_fake.env}


@pytest.fixture
def amdsmi_inprocess(
    amdsmi_root: Path, amdsmi_fake: state.FakeAmdSmi, monkeypatch: pytest.MonkeyPatch
) -> state.FakeAmdSmi:
    """Make ``import amdsmi`` in this process load the fake, with this test's state.

    amdsmi binds its library once per process, so every in-process test shares
    one loaded fake; the state file is chosen at amdsmi_init, per test.
    """
    for key, value in build.env_for(amdsmi_root, {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FAKE_AMDSMI_STATE", str(amdsmi_fake.path))
    return amdsmi_fake


@pytest.fixture
def amdsmi_backends(amdsmi_inprocess: state.FakeAmdSmi) -> Iterator[Backends[Any]]:
    """``make(**config)`` -> an in-process AmdSmiBackend (events off unless asked) on the fake.

    Hangs are released and every backend made is closed at teardown.
    """
    from exporter.backends.amdsmi import AmdSmiBackend

    with backends(AmdSmiBackend, events=False) as made:
        yield made
        amdsmi_inprocess.clear_rules()
        amdsmi_inprocess.release_hangs()
