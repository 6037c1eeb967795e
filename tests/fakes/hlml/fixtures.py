"""Pytest fixtures for the fake libhlml.so (registered in tests/conftest.py): ``hlml_lib``,
``hlml_fake`` (eight Gaudi 2 devices), ``hlml_inprocess``, ``hlml_backends`` (see
tests.fakes.state_file.fixtures)."""

from __future__ import annotations

from tests.fakes.hlml.control import FakeHlml, build
from tests.fakes.state_file import fixtures

hlml_lib, hlml_fake, hlml_inprocess, hlml_backends = fixtures(
    "hlml", FakeHlml.create, build, devices=8, backend="exporter.backends.hlml:HlmlBackend"
)
