"""A supervised child's stderr, drained line by line and bounded per life.

A device worker and neuron-monitor both write to stderr whatever their vendor code
prints. Left unread, a full pipe would block the child; read without a bound, a
child printing in a loop would flood the log. Both supervisors (the worker runner,
:mod:`exporter.sources.neuron_monitor`) drain it here, each passing how it relays a
line, and a life's lines past ``limit`` are counted once as suppressed.

What a child writes is the child's: a relay that fails on a line (a key that
collides with ours, a level no logger has) must not end the drain, because a
drain that stops leaves the child blocked on a full pipe. :func:`relay_structured`
therefore takes only known levels and keeps the child's keys apart from ours, and
:func:`drain` survives a relay that raises anyway.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection
from typing import Any

from exporter import log

LEVELS = ("debug", "info", "warning", "error", "critical")
"""The levels a child's structured line may ask for; any other is relayed at info."""

_ALIASES = {"warn": "warning", "exception": "error", "fatal": "critical"}
# Keys structlog's processors add to every line: a child's are its own, not ours.
_PROCESSOR_KEYS = frozenset({"event", "level", "log_level", "timestamp"})
CHILD_PREFIX = "child_"
"""Put before a child's key that would collide with one of ours."""

_LOG = log.get("accel-exporter.child_output")


async def drain(
    stream: asyncio.StreamReader,
    limit: int,
    relay: Callable[[str], None],
    suppressed: Callable[[], None],
) -> None:
    """Relay each line (decoded, right-stripped) until the stream ends.

    Past ``limit`` lines, ``suppressed()`` once and nothing more. A line longer than
    the stream's buffer is skipped. A relay that raises loses that line only.
    """
    lines = 0
    while True:
        try:
            raw = await stream.readline()
        except (ValueError, asyncio.LimitOverrunError):
            continue  # longer than the buffer: asyncio drops it, the next line is whole
        if not raw:
            return
        lines += 1
        if lines <= limit:
            try:
                relay(raw.decode("utf-8", "replace").rstrip())
            except Exception as exc:  # the drain must outlive any line (module docstring)
                _LOG.warning("child output not relayed", error=type(exc).__name__)
        elif lines == limit + 1:
            suppressed()


def level_of(value: object) -> str:
    """The known level a child asked for (case-insensitive, common aliases), else info."""
    text = str(value).lower()
    text = _ALIASES.get(text, text)
    return text if text in LEVELS else "info"


def structured(line: str) -> dict[str, Any] | None:
    """A child's JSON log line as a dict with a string ``event``, else None."""
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict) and isinstance(event.get("event"), str):
        return event
    return None


def relay_structured(
    logger: Any,
    event: dict[str, Any],
    ours: dict[str, Any],
    *,
    replaced: Collection[str] = (),
) -> None:
    """Re-log a child's structured line on ``logger`` at its (known) level.

    ``ours`` are the keys the supervisor adds (e.g. ``worker_pid``); a child's key
    of the same name, or one structlog adds itself, is kept as ``child_<key>``.
    Keys in ``replaced`` are the child's copy of something ``logger`` already
    carries (its ``source``) and are dropped.
    """
    name = str(event["event"])
    level = level_of(event.get("level", "info"))
    fields: dict[str, Any] = {}
    for key, value in event.items():
        text = str(key)
        if text in ("event", "level", "timestamp") or text in replaced:
            continue
        if text in ours or text in _PROCESSOR_KEYS:
            text = CHILD_PREFIX + text
        fields[text] = value
    getattr(logger, level)(name, **ours, **fields)
