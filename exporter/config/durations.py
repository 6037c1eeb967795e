"""Durations written as ``250ms``, ``15s``, ``1m``, ``1h30m`` (the config's name for them).

The parser lives in :mod:`exporter.durations`, outside the config package, so that a
check's command line can read ``--window 10m`` without importing the config schema.
"""

from __future__ import annotations

from exporter.durations import format_duration, parse_duration

__all__ = ["format_duration", "parse_duration"]
