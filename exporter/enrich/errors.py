"""The error attribution readers raise: a short snake_case reason plus a detail."""

from __future__ import annotations


class AttributionError(Exception):
    """One lookup failed; ``reason`` is counted in ``accel_workload_attribution_errors_total``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail or reason
