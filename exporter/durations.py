"""Durations written as ``250ms``, ``15s``, ``1m``, ``1h30m``."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds for a duration string; ValueError with the accepted forms otherwise.

    A bare number is refused on purpose: an interval of ``3`` meant milliseconds
    to some users of other exporters and seconds to others.
    """
    raw = text.strip()
    if raw.startswith("-"):
        raise ValueError(f"negative duration {text!r}")
    pos = 0
    total = 0.0
    for match in _PART.finditer(raw):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _FACTORS[match.group(2)]
        pos = match.end()
    if pos != len(raw) or not raw:
        raise ValueError(f"invalid duration {text!r} (write e.g. 250ms, 15s, 1m, 1h30m)")
    return total


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` in the syntax above."""
    if seconds == 0:
        return "0s"
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms"
    s = ms // 1000
    for unit, size in (("h", 3600), ("m", 60)):
        if s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"
