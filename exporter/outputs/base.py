"""What a push output is: started after the sources, flushed and stopped last."""

from __future__ import annotations

from typing import Any, Protocol


class Output(Protocol):
    """A push output reading the store on its own schedule (e.g. OTLP)."""

    name: str

    async def start(self) -> None:
        """Begin exporting."""
        ...

    async def stop(self, deadline: float) -> None:
        """Flush once, within ``deadline`` seconds, and release everything."""
        ...

    def status(self) -> dict[str, Any]:
        """Fields for /status."""
        ...
