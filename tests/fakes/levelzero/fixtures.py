"""Pytest fixtures for the fake libze_loader.so.1 (registered in tests/conftest.py):
``ze_lib`` (its own SONAME: pointed at by library_path), ``ze_fake`` (four Max
1550-like GPUs), ``ze_inprocess``, ``ze_backends`` (see tests.fakes.state_file.fixtures)."""

from __future__ import annotations

from tests.fakes.levelzero.control import FakeZe, build
from tests.fakes.state_file import fixtures

ze_lib, ze_fake, ze_inprocess, ze_backends = fixtures(
    "ze", FakeZe.create, build, devices=4, backend="exporter.backends.levelzero:LevelZeroBackend"
)
