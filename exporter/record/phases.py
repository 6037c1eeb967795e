"""The phase file a training script appends to, read as it grows.

One JSON object per line. ``{"phase": "train"}`` starts a phase (ending the
previous one); ``{"event": "checkpoint_saved"}`` records an event. An optional
``"time"`` (Unix seconds) says when it happened (default: when it was read);
every other key is kept as data. Anything else is reported as a bad line.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

MAX_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Marker:
    """One line of the phase file: a phase start, an event, or a bad line."""

    kind: str  # "phase" | "event" | "bad"
    name: str
    time: float
    data: dict[str, Any] = field(default_factory=dict)


def parse_line(line: bytes, now: float) -> Marker:
    """One line -> a marker; never raises (anything unusable is a "bad" marker)."""
    try:
        item = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Marker("bad", f"not JSON: {exc}"[:200], now)
    if not isinstance(item, dict):
        return Marker("bad", "not a JSON object", now)
    stamp = item.pop("time", now)
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
        return Marker("bad", "time must be a number (Unix seconds)", now)
    try:
        when = float(stamp)
    except OverflowError:  # an integer beyond any float
        when = math.inf
    if not math.isfinite(when):
        return Marker("bad", "time must be a finite number (Unix seconds)", now)
    for kind in ("phase", "event"):
        name = item.pop(kind, None)
        if isinstance(name, str) and name:
            return Marker(kind, name, when, item)
    return Marker("bad", 'needs a non-empty "phase" or "event" string', now)


class PhaseTail:
    """Reads the lines appended to a file since the last call (partial lines wait)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self, final: bool = False) -> list[Marker]:
        """Markers of the complete lines added since the last read (all lines when final)."""
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self._offset:  # truncated: start over
                    self._offset, self._partial = 0, b""
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if final and self._partial.strip():
            lines.append(self._partial)
            self._partial = b""
        now = time.time()
        out = []
        for line in lines:
            if not line.strip():
                continue
            if len(line) > MAX_LINE_BYTES:
                out.append(Marker("bad", "line longer than 64 KiB", now))
                continue
            out.append(parse_line(line, now))
        if len(self._partial) > MAX_LINE_BYTES:
            out.append(Marker("bad", "line longer than 64 KiB", now))
            self._partial = b""
        return out
