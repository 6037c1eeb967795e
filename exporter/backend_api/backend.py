"""The contract a backend fulfils inside a worker process (the worker drives it).

A backend is constructed with its config (a JSON object), then ``bootstrap()``
loads the vendor library and returns the inventory; ``handle(op, args)`` answers
each request. Everything a backend returns must be JSON. Vendor exceptions are
converted here, at the boundary, into :class:`BackendError` with a reason.
"""

from __future__ import annotations

from typing import Any, Protocol


class BackendError(Exception):
    """A request or the bootstrap failed; ``reason`` is a short snake_case code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail or reason


class BackendUnavailable(BackendError):
    """The library or driver is not present: with ``enabled: auto`` not an error."""


# Reason of InventoryChanged, which the daemon answers by restarting the worker.
INVENTORY_CHANGED = "inventory_changed"


class InventoryChanged(BackendError):
    """The devices no longer match the inventory the bootstrap announced.

    E.g. a GPU that could not be identified then can now, or a MIG mode switched:
    only a new worker can describe them, so the daemon restarts it at once and
    polls again.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(INVENTORY_CHANGED, detail)


class Backend(Protocol):
    """What the worker child loop drives."""

    def __init__(self, config: dict[str, Any]) -> None: ...

    def bootstrap(self) -> dict[str, Any]:
        """Load the library, enumerate devices, return the inventory."""
        ...

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer one request."""
        ...

    def close(self) -> None:
        """Release the library (best effort; the process exits next)."""
        ...
