"""Nagios plugin output: status, one line of text, perfdata, exit code."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import IntEnum


class Status(IntEnum):
    """Nagios plugin states, in increasing severity (UNKNOWN is reported as is)."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


# Node Problem Detector custom plugins: 0 OK, 1 NonOK, 2 Unknown.
_NPD = {Status.OK: 0, Status.WARNING: 1, Status.CRITICAL: 1, Status.UNKNOWN: 2}
_LABEL_SAFE = re.compile(r"^[A-Za-z0-9_.:/-]+$")
MAX_TEXT = 400


def worst(statuses: list[Status]) -> Status:
    """The most severe of ``statuses`` (CRITICAL over WARNING over UNKNOWN over OK)."""
    order = [Status.OK, Status.UNKNOWN, Status.WARNING, Status.CRITICAL]
    return max(statuses, key=order.index, default=Status.OK)


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Perf:
    """One perfdata item: ``'label'=value[uom];[warn];[crit];[min];[max]``.

    A value of None is rendered ``U`` (the plugin guidelines' "undetermined"):
    a figure the exporter does not have is never shown as 0.
    """

    label: str
    value: float | None
    uom: str = ""
    warn: str = ""
    crit: str = ""
    minimum: float | None = None
    maximum: float | None = None

    def render(self) -> str:
        """The item as Nagios wants it (trailing empty fields dropped)."""
        label = (
            self.label if _LABEL_SAFE.match(self.label) else "'" + self.label.replace("'", "") + "'"
        )
        fields = [
            "U" if self.value is None else f"{_number(self.value)}{self.uom}",
            self.warn,
            self.crit,
            _number(self.minimum),
            _number(self.maximum),
        ]
        while len(fields) > 1 and fields[-1] == "":
            fields.pop()
        return f"{label}={';'.join(fields)}"


@dataclass(frozen=True)
class Result:
    """The outcome of a check."""

    status: Status
    text: str
    perfdata: list[Perf] = field(default_factory=list)


def render(name: str, result: Result) -> str:
    """``NAME STATUS - text | perfdata`` on a single line."""
    text = " ".join(result.text.split())
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 3] + "..."
    # '|' separates perfdata; it must not appear in the text.
    line = f"{name.upper()} {result.status.name} - {text.replace('|', '/')}"
    if result.perfdata:
        line += " | " + " ".join(p.render() for p in result.perfdata)
    return line


def exit_code(status: Status, convention: str) -> int:
    """The process exit status for ``status`` under ``nagios`` or ``npd`` conventions."""
    return _NPD[status] if convention == "npd" else int(status)
