"""structlog setup: JSON lines in production, a readable console on a TTY.

Every line goes to stderr. A processor drops values of keys that could carry a
secret (passwords, hashes, tokens, authorization headers) before rendering, so a
careless ``log.info(..., headers=...)`` cannot leak one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_SECRET_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "authorization",
    "bcrypt",
    "credential",
    "headers",
)
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if any(word in key.lower() for word in _SECRET_WORDS):
            event[key] = "[redacted]"
    return event


def configure(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog globally; safe to call again (e.g. after a config reload)."""
    out = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


def get(name: str = "accel-exporter", **context: Any) -> Any:
    """A bound logger carrying ``context`` (e.g. ``source="nvml"``) on every line."""
    return structlog.get_logger(name).bind(**context)
