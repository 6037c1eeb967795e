"""Backoff between attempts: a supervised child's restarts, an output's reconnects.

Below every supervisor, so that one backoff serves the worker runner
(:mod:`exporter.workers.runner`), a backend that supervises a process of its
own, and an output that reconnects (:mod:`exporter.outputs.nvsentinel`), without
any of them importing another.
"""

from __future__ import annotations

RESTART_BASE_SECONDS = 1.0
RESTART_CAP_SECONDS = 60.0


def delay(failures: int, base: float, cap: float) -> float:
    """``base`` doubled for each of ``failures`` after the first, at most ``cap``."""
    return float(min(base * 2 ** max(failures - 1, 0), cap))


def restart_delay(failures: int) -> float:
    """Backoff before the next start after ``failures`` consecutive bad lives."""
    return delay(failures, RESTART_BASE_SECONDS, RESTART_CAP_SECONDS)
