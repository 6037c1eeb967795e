"""Shared fixtures: a daemon factory that always stops what it started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.daemon import Daemon

pytest_plugins = ["tests.fakes.amdsmi.fixtures"]


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Any]:
    """``daemon_factory(config=..., env=..., extra_sources=...)`` -> a started Daemon."""
    started: list[Daemon] = []

    def make(config: dict[str, Any] | None = None, **kwargs: Any) -> Daemon:
        d = Daemon(tmp_path, config, **kwargs)
        started.append(d)
        return d.start()

    yield make
    for d in started:
        d.__exit__()
