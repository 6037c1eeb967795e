"""The restart backoff of a supervised child process (a device worker, neuron-monitor).

Below every supervisor, so that one backoff serves the worker runner
(:mod:`exporter.workers.runner`) and a backend that supervises a process of its
own, without either importing the other.
"""

from __future__ import annotations

RESTART_BASE_SECONDS = 1.0
RESTART_CAP_SECONDS = 60.0


def restart_delay(failures: int) -> float:
    """Backoff before the next start after ``failures`` consecutive bad lives."""
    return float(min(RESTART_BASE_SECONDS * 2 ** max(failures - 1, 0), RESTART_CAP_SECONDS))
