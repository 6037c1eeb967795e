"""Pure decoding of the RAS ``MONITOR`` event stream (NCCL 2.29.2+).

Text mode sends one line per event: ``[%F %T] <EVENT>: <peer> <details>``.
JSON mode sends pretty-printed objects back to back, each closed by a ``}``
alone on its line. The server does not escape ``details`` in JSON, so an
object can be invalid; the event name and group are then recovered from their
own lines, and only an object without them is counted as malformed. Buffers are
bounded: a line longer than :data:`MAX_LINE` is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_LINE = 8192
# An object is a handful of lines; more without a closing brace is not one.
MAX_OBJECT_LINES = 64
_EVENT_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,47}$")
_TEXT_EVENT = re.compile(r"^\[([^\]]*)\] ([A-Z][A-Z0-9_]*): ?(.*)$")
_TEXT_PEER = re.compile(r"^Process (\d+) on node (\S+)")
_JSON_FIELD = re.compile(r'^\s*"(event|group|timestamp)"\s*:\s*"([^"\n]*)"')


@dataclass(frozen=True, slots=True)
class MonitorEvent:
    """One RAS event: its type (``PEER_DEAD``, ...), group, and the peer when known."""

    event: str
    group: str = ""
    timestamp: str = ""
    host: str = ""
    pid: int | None = None
    details: str = ""


class MonitorDecoder:
    """Feed it the stream's bytes as they come; it returns the complete events."""

    def __init__(self) -> None:
        self._partial = b""
        self._discarding = False
        self._object: list[str] = []
        self.malformed = 0

    def feed(self, data: bytes) -> list[MonitorEvent]:
        """Decode what ``data`` completes; keeps an unfinished line for the next call."""
        events: list[MonitorEvent] = []
        buffer = self._partial + data
        lines = buffer.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            self._partial = b""
            self._discarding = True
        for raw in lines:
            if self._discarding:
                self._discarding = False
                self.malformed += 1
                continue
            if len(raw) > MAX_LINE:
                self.malformed += 1
                continue
            event = self._line(raw.decode("utf-8", errors="replace").rstrip("\r"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> MonitorEvent | None:
        if self._object or line == "{":
            self._object.append(line)
            if line == "}":
                lines, self._object = self._object, []
                return self._json_event(lines)
            if len(self._object) > MAX_OBJECT_LINES:
                self._object = []
                self.malformed += 1
            return None
        if not line.strip():
            return None
        match = _TEXT_EVENT.match(line)
        if match is None or not _EVENT_NAME.match(match.group(2)):
            self.malformed += 1
            return None
        timestamp, name, rest = match.groups()
        peer = _TEXT_PEER.match(rest)
        return MonitorEvent(
            event=name,
            timestamp=timestamp,
            host=peer.group(2) if peer else "",
            pid=int(peer.group(1)) if peer else None,
            details=rest,
        )

    def _json_event(self, lines: list[str]) -> MonitorEvent | None:
        try:
            value = json.loads("\n".join(lines))
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("event"), str):
            peer = value.get("peer") if isinstance(value.get("peer"), dict) else {}
            assert isinstance(peer, dict)
            pid = peer.get("pid")
            host = peer.get("host", peer.get("addr", ""))
            name = value["event"]
            if _EVENT_NAME.match(name):
                return MonitorEvent(
                    event=name,
                    group=str(value.get("group", "")),
                    timestamp=str(value.get("timestamp", "")),
                    host=host if isinstance(host, str) else "",
                    pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                    details=str(value.get("details", "")),
                )
        # Unescaped details made the object invalid: take the fields from their own lines.
        fields: dict[str, str] = {}
        for line in lines:
            match = _JSON_FIELD.match(line)
            if match:
                fields.setdefault(match.group(1), match.group(2))
        name = fields.get("event", "")
        if not _EVENT_NAME.match(name):
            self.malformed += 1
            return None
        return MonitorEvent(
            event=name, group=fields.get("group", ""), timestamp=fields.get("timestamp", "")
        )
