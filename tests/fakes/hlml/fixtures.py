"""Pytest fixtures for the fake libhlml.so (registered in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.hlml.control import FakeHlml, build
from tests.helpers.native import built_once


@pytest.fixture(scope="session")
def hlml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libhlml.so, built once per session."""
    return built_once("hlml", build, tmp_path_factory.mktemp("hlml"))


@pytest.fixture
def hlml_fake(tmp_path: Path) -> Iterator[FakeHlml]:
    """Eight Gaudi 2 devices; rules (and so hung calls) are cleared at teardown."""
    fake = FakeHlml.create(tmp_path / "hlml-state.bin", devices=8)
    yield fake
    fake.clear()


@pytest.fixture
def hlml_inprocess(hlml_fake: FakeHlml, monkeypatch: pytest.MonkeyPatch) -> FakeHlml:
    """Point this process's fake libhlml at this test's state (read at hlml_init)."""
    monkeypatch.setenv("FAKE_HLML_STATE", str(hlml_fake.path))
    return hlml_fake
