"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (their paths are limited to 107 bytes, and
    pytest's tmp_path can be longer)."""
    with tempfile.TemporaryDirectory(prefix="k8s-") as name:
        yield Path(name)
