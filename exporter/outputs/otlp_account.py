"""Bookkeeping of OTLP export attempts: the counter, the failure log policy, /status fields.

Every attempt is counted in ``accel_exporter_otlp_exports_total{result}``
(published to the store, so /metrics and the next OTLP export both show it).
The first failure of a run of failures is logged at once, later ones at most
every ``log_every`` seconds with how many failed since, and the recovery once:
a collector that is down for a day costs a day's worth of minutes in log lines,
not one per attempt.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from exporter import log
from exporter.family_names import ACCEL_EXPORTER_OTLP_EXPORTS_TOTAL
from exporter.model import Reading
from exporter.store import Store

METRIC = ACCEL_EXPORTER_OTLP_EXPORTS_TOTAL
RESULTS = ("success", "failure")
LOG_EVERY_SECONDS = 60.0


class ExportAccount:
    """Counts and logs export results for one output (its threads record one at a time)."""

    def __init__(self, store: Store, endpoint: str, log_every: float = LOG_EVERY_SECONDS) -> None:
        self.store = store
        self.endpoint = endpoint
        self.log_every = log_every
        self.counts = dict.fromkeys(RESULTS, 0.0)
        # Set when this output was abandoned at shutdown: a reload's successor owns the counter.
        self.detached = threading.Event()
        self.consecutive_failures = 0
        self.last_success: float | None = None
        self.last_error = ""
        self.last_duration: float | None = None
        self._unlogged = 0
        self._last_log = -math.inf
        self._failing_since: float | None = None
        self._log = log.get(output="otlp")

    def resume(self) -> None:
        """Continue the counter a previous output (before a reload) left in the store."""
        for reading in self.store.view().readings(METRIC):
            result, value = reading.labels[0], reading.value
            if result in self.counts and isinstance(value, float):
                self.counts[result] = value
        self.publish()

    def publish(self) -> None:
        """Put the counter into the store, unless this output was abandoned."""
        if not self.detached.is_set():
            readings = [Reading(METRIC, (result,), self.counts[result]) for result in RESULTS]
            self.store.publish("otlp", readings)

    def record(self, ok: bool, error: str, duration: float) -> None:
        """Account for one attempt and log what deserves it."""
        self.counts["success" if ok else "failure"] += 1
        self.last_duration = duration
        self.publish()
        now = time.monotonic()
        if ok:
            if self.consecutive_failures:
                self._log.info(
                    "otlp export recovered",
                    endpoint=self.endpoint,
                    failed_exports=self.consecutive_failures,
                    outage_seconds=round(now - (self._failing_since or now), 1),
                )
            self.consecutive_failures = self._unlogged = 0
            self._failing_since = None
            self.last_success = time.time()
            self.last_error = ""
            return
        self.consecutive_failures += 1
        self._unlogged += 1
        self.last_error = error
        if self._failing_since is None:
            self._failing_since = now
        if self.consecutive_failures == 1 or now - self._last_log >= self.log_every:
            self._log.warning(
                "otlp export failed" if self.consecutive_failures == 1 else "otlp export failing",
                endpoint=self.endpoint,
                error=error,
                failures=self._unlogged,
                consecutive_failures=self.consecutive_failures,
            )
            self._last_log = now
            self._unlogged = 0

    def status(self) -> dict[str, Any]:
        """The accounting part of /status."""
        return {
            "exports": {result: int(count) for result, count in self.counts.items()},
            "consecutive_failures": self.consecutive_failures,
            "last_success": self.last_success,
            "last_error": self.last_error,
            "last_duration": self.last_duration,
        }
