"""A source whose blocking work runs in a worker process (see exporter.workers.runner)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.config.source import SourceConfig
from exporter.sources.base import Source
from exporter.workers.runner import WorkerRunner


class WorkerSource(Source):
    """Owns a :class:`WorkerRunner`: starts it, waits for its bootstrap, stops and reaps it."""

    def __init__(
        self,
        name: str,
        config: SourceConfig,
        backend: str,
        backend_config: Mapping[str, Any],
        *,
        bootstrap_timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(name, config)
        self.runner = WorkerRunner(
            name, backend, dict(backend_config), bootstrap_timeout=bootstrap_timeout, env=env
        )

    def fingerprint(self) -> tuple[Any, ...]:
        """The section, and what the worker is started with."""
        r = self.runner
        return (*super().fingerprint(), r.backend, r.config, r.bootstrap_timeout, r.env)

    @property
    def restarts(self) -> int:
        """Worker restarts so far."""
        return self.runner.state.restarts

    async def start(self) -> None:
        """Start the worker supervisor; bootstrap proceeds in the background."""
        await self.runner.start()

    async def wait_ready(self, timeout: float) -> None:
        """Wait for the first bootstrap to end (ready, unavailable or failed)."""
        await self.runner.settled(timeout)

    async def close(self) -> None:
        """Stop and reap the worker."""
        await self.runner.stop()

    def status(self) -> dict[str, Any]:
        """The worker's state for /status."""
        return self.runner.status()
