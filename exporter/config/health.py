"""The ``health`` section: how the health verdict weighs device events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from exporter.actions import ACTIONS
from exporter.config.fields import Duration


@dataclass(frozen=True)
class HealthConfig:
    """How the health verdict weighs device events (docs/health.md)."""

    HELP: ClassVar[dict[str, str]] = {
        "event_window": "how long an XID or AFID counts, from the event's own time",
        "xid_actions": "XID code -> action, over NVIDIA's catalog (e.g. '13': none)",
        "afid_actions": "AFID -> action, from AMD's AFID Event List (unlisted: service)",
        "state_dir": "where the health memory (XIDs, AFIDs, resets) survives restarts",
    }

    event_window: Duration = 3600.0
    xid_actions: dict[str, str] = field(default_factory=dict)
    afid_actions: dict[str, str] = field(default_factory=dict)
    state_dir: str = ""

    def check(self) -> list[tuple[str, str]]:
        """A positive window; override keys that are codes, values in the vocabulary."""
        out: list[tuple[str, str]] = []
        if self.event_window <= 0:
            out.append(("event_window", "must be more than 0"))
        for key, table in (("xid_actions", self.xid_actions), ("afid_actions", self.afid_actions)):
            for code, action in table.items():
                if not code.isdigit():
                    out.append((f"{key}.{code}", "is not a code (a whole number)"))
                if action not in ACTIONS:
                    out.append((f"{key}.{code}", f"must be one of {', '.join(ACTIONS)}"))
        return out
