"""A GPU's CPER ledger as the daemon and the amdsmi worker pass it to each other.

The daemon owns each ledger (the ring's cursor and the AFID counts so far) and keeps it in
its state file (:mod:`exporter.sources.cper_ledger`); the worker
(:mod:`exporter.backends.amdsmi_ras`) gets it in every poll and answers the next one. This
is the codec both sides share: the worker never trusts what the daemon sent, nor the daemon
what a worker or the state file holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class LedgerError(ValueError):
    """A ledger from the daemon (or its state file) that does not have the expected shape."""


@dataclass
class Ledger:
    """What one GPU's CPER ring has yielded: the cursor and the AFID counts so far."""

    cursor: int = 0
    # "<afid>/<severity>" -> records naming that AFID.
    counts: dict[str, int] = field(default_factory=dict)
    # "<afid>" -> unix time of the newest record naming it.
    last: dict[str, float] = field(default_factory=dict)
    # reason -> records skipped (bad length, AFID decoding failed, ...).
    skipped: dict[str, int] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "cursor": self.cursor,
            "counts": dict(self.counts),
            "last": dict(self.last),
            "skipped": dict(self.skipped),
        }

    @classmethod
    def from_wire(cls, raw: Any) -> Ledger:
        """Parse what :meth:`to_wire` wrote; LedgerError when it does not fit."""
        if not isinstance(raw, dict):
            raise LedgerError("a ledger is an object")
        cursor = raw.get("cursor", 0)
        if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
            raise LedgerError("cursor must be a non-negative integer")
        return cls(
            cursor,
            _table(raw.get("counts", {}), int, "counts"),
            _table(raw.get("last", {}), float, "last"),
            _table(raw.get("skipped", {}), int, "skipped"),
        )


def _table(raw: Any, kind: type, name: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise LedgerError(f"{name} must be an object")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise LedgerError(f"{name}[{key!r}] must be a non-negative number")
        if kind is int and not isinstance(value, int):
            raise LedgerError(f"{name}[{key!r}] must be an integer")
        out[str(key)] = kind(value)
    return out
