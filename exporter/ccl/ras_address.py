"""What the RAS source tracks for one address between polls, and the series of its own.

One :class:`Address` per configured ``host:port`` of ``sources.ccl_ras``
(:mod:`exporter.sources.ccl_ras`): the job state machine and stall tracker, the
query-duration histogram, the format fallback, the election, the MONITOR
stream's task and event counts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from exporter.catalog.ccl import QUERY_BUCKETS
from exporter.ccl.ras_client import PROTOCOL, Endpoint
from exporter.ccl.ras_state import ProgressTracker, StateMachine
from exporter.family_names import (
    ACCEL_CCL_JOB_STATE_TRANSITIONS_TOTAL,
    ACCEL_CCL_RAS_EVENTS_TOTAL,
    ACCEL_CCL_RAS_MONITOR_UP,
    ACCEL_CCL_RAS_QUERY_DURATION_SECONDS,
    ACCEL_CCL_RAS_TIMEOUTS_TOTAL,
)
from exporter.model import Reading
from exporter.store import HistogramAccumulator


@dataclass
class Address:
    """Everything tracked for one RAS address between polls."""

    endpoint: Endpoint
    machine: StateMachine = field(default_factory=StateMachine)
    progress: ProgressTracker = field(default_factory=lambda: ProgressTracker(1))
    durations: HistogramAccumulator = field(
        default_factory=lambda: HistogramAccumulator(QUERY_BUCKETS)
    )
    timeouts: int = 0
    # The last JSON report's election (None: not elected either way, act as reporter).
    elected: bool | None = None
    # format auto after unparsable JSON: text until then (monotonic), and why.
    text_until: float = 0.0
    json_failures: int = 0
    fallback: bool = False
    next_due: float = 0.0
    queried: bool = False
    readings: list[Reading] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    detail: str = ""
    format: str = ""
    peer: str = ""
    version: str = ""
    protocol: str = str(PROTOCOL)
    monitor_task: asyncio.Task[None] | None = None
    monitor_up: bool = False
    events: dict[str, int] = field(default_factory=dict)

    def counters(self) -> list[Reading]:
        """The series of the address itself: query durations, timeouts, transitions, MONITOR."""
        label = (self.endpoint.label,)
        out: list[Reading] = []
        if self.durations.value().count:
            out.append(Reading(ACCEL_CCL_RAS_QUERY_DURATION_SECONDS, label, self.durations.value()))
        out.append(Reading(ACCEL_CCL_RAS_TIMEOUTS_TOTAL, label, float(self.timeouts)))
        for (old, new), count in sorted(self.machine.transitions.items()):
            out.append(
                Reading(ACCEL_CCL_JOB_STATE_TRANSITIONS_TOTAL, (*label, old, new), float(count))
            )
        if self.monitor_task is not None:
            out.append(Reading(ACCEL_CCL_RAS_MONITOR_UP, label, 1.0 if self.monitor_up else 0.0))
        for event, count in sorted(self.events.items()):
            out.append(Reading(ACCEL_CCL_RAS_EVENTS_TOTAL, (*label, event), float(count)))
        return out
