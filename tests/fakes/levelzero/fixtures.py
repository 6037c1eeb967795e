"""Pytest fixtures for the fake libze_loader.so.1 (registered in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.levelzero.control import FakeZe, build
from tests.helpers.native import built_once


@pytest.fixture(scope="session")
def ze_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake loader, built once per session (its own SONAME: pointed at by library_path)."""
    return built_once("levelzero", build, tmp_path_factory.mktemp("ze"))


@pytest.fixture
def ze_fake(tmp_path: Path) -> Iterator[FakeZe]:
    """Four Max 1550-like GPUs; rules (and so hung calls) are cleared at teardown."""
    fake = FakeZe.create(tmp_path / "ze-state.bin", devices=4)
    yield fake
    fake.clear()


@pytest.fixture
def ze_inprocess(ze_fake: FakeZe, monkeypatch: pytest.MonkeyPatch) -> FakeZe:
    """Point this process's fake loader at this test's state (read at zesInit)."""
    monkeypatch.setenv("FAKE_ZE_STATE", str(ze_fake.path))
    return ze_fake
