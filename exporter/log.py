"""structlog setup: JSON lines in production, a readable console on a TTY.

Every line goes to stderr. A processor drops values of keys that could carry a
secret (passwords, hashes, tokens, authorization headers) before rendering, so a
careless ``log.info(..., headers=...)`` cannot leak one.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

# structlog imports rich and better_exceptions where installed (tpu-info brings rich),
# only to offer their tracebacks, which this daemon does not use: rich's print the
# frames' locals (a secret among them), so tracebacks are plain on every install. Hidden
# while structlog loads (rich is 70 ms of every start and check), importable after.
_HIDDEN = [name for name in ("rich", "better_exceptions") if name not in sys.modules]
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]
try:
    import structlog
finally:
    for _name in _HIDDEN:
        if _name in sys.modules and sys.modules[_name] is None:
            del sys.modules[_name]

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


class _Stderr:
    """A structlog logger writing each line to ``sys.stderr`` as it is when the line is written.

    structlog's PrintLogger keeps the file it was made with, and bound loggers keep their
    PrintLogger: a command run in-process whose stderr was swapped and closed since (a
    test's capture, a caller's redirection) would leave every later line failing with
    "I/O operation on closed file".
    """

    _lock = threading.Lock()

    def msg(self, message: str) -> None:
        """Write one rendered line."""
        with self._lock:
            print(message, file=sys.stderr, flush=True)

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


# The level last configured: what a new worker is told in its init frame (a worker
# never reads it from the environment, which a reload would have to mutate).
_CONFIGURED = {"level": "info"}


def level() -> str:
    """The level :func:`configure` last set (one of debug, info, warning, error)."""
    return _CONFIGURED["level"]


def configure(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog globally; safe to call again (e.g. after a config reload).

    Lines go to ``stream``, or to whatever ``sys.stderr`` is when each is written.
    """
    _CONFIGURED["level"] = level if level in _LEVELS else "info"
    out = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
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
        logger_factory=(
            structlog.PrintLoggerFactory(stream) if stream is not None else lambda *_: _Stderr()
        ),
        cache_logger_on_first_use=False,
    )


def get(name: str = "accel-exporter", **context: Any) -> Any:
    """A bound logger carrying ``context`` (e.g. ``source="nvml"``) on every line."""
    return structlog.get_logger(name).bind(**context)
