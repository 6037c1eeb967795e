"""Job state from RAS reports: classification, stall detection across polls, reporter election.

Pure logic, no I/O. The state of a job seen through one RAS address is one of
:data:`STATES`:

- ``no_job``: nothing listens (connection refused) - the normal state of a node
  without an NCCL job;
- ``unreachable``: no complete report within the deadline (the RAS collective or
  the process is stuck);
- ``error``: the service answered something that is not a report (protocol or
  parse failure, reset mid-report);
- ``healthy`` / ``degraded``: a report, with or without missing or dead
  processes or ranks, init/async errors, aborted communicators or ranks that
  disagree on a communicator's status;
- ``stalled``: communicators RUNNING but no operation count moved for
  ``stall_polls`` polls in a row - the hang RAS itself reports as OK (NCCL
  issue #1730). A stall wins over degradation: the job makes no progress, and
  the degradation that probably caused it stays visible in its own series.

Operation counts only grow, so "did any count move" is tracked by a compact
fingerprint per communicator (the sum of every rank's counts) instead of
keeping every rank's counts between polls.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.catalog.vocabulary import CCL_JOB_STATES
from exporter.ccl.hosts import lowest_host, normalize
from exporter.ccl.ras_model import RasReport

# accel_ccl_job_state's one-hot states, as the catalog lists them.
STATES = CCL_JOB_STATES
# States in which the service returned a report.
REPORTED = frozenset({"healthy", "degraded", "stalled"})

Fingerprint = tuple[tuple[object, ...], ...]


def degradations(report: RasReport) -> list[str]:
    """Why a report describes a degraded job (empty when healthy), as snake_case words."""
    reasons: list[str] = []
    if report.missing_process_count > 0:
        reasons.append("missing_processes")
    if report.dead_process_count > 0:
        reasons.append("dead_processes")
    comms = report.communicators
    if any(c.unresponsive_ranks for c in comms) or any(
        "INCOMPLETE" in g.errors for g in report.groups
    ):
        reasons.append("missing_ranks")
    if any(c.init_error_ranks or c.async_error_ranks for c in comms) or any(
        "ERROR" in g.errors for g in report.groups
    ):
        reasons.append("nccl_errors")
    if any(c.status == "ABORT" for c in comms) or any(g.status == "ABORT" for g in report.groups):
        reasons.append("aborted")
    if any(c.status_mismatch for c in comms):
        reasons.append("status_mismatch")
    return reasons


def fingerprint(report: RasReport) -> Fingerprint | None:
    """What must change between two polls for the job to have made progress.

    None when the report carries no operation counts at all (a text report
    with no count mismatch): progress cannot be judged from it.
    """
    running = [c for c in report.communicators if c.status == "RUNNING"]
    if report.has_rank_counts:
        return tuple(
            (c.hash, len(c.ranks), sum(sum(r.counts.values()) for r in c.ranks))
            for c in sorted(running, key=lambda c: c.hash)
        )
    parts = [
        (c.hash, name, low, high)
        for c in running
        for name, (low, high) in sorted(c.op_range.items())
    ]
    return tuple(sorted(parts)) if parts else None


@dataclass
class ProgressTracker:
    """Counts consecutive polls in which no operation count moved."""

    stall_polls: int
    unchanged: int = 0
    last: Fingerprint | None = None
    last_progress: float | None = None

    def observe(self, report: RasReport, now: float) -> bool:
        """Feed one report taken at wall time ``now``; True when the job is stalled."""
        current = fingerprint(report) if report.running else None
        if current is None:
            self.reset()
            return False
        if current == self.last:
            self.unchanged += 1
        else:
            self.unchanged = 0
            self.last = current
            self.last_progress = now
        return self.unchanged >= self.stall_polls

    def reset(self) -> None:
        """Forget history (no job, or nothing to compare)."""
        self.unchanged = 0
        self.last = None
        self.last_progress = None


def classify(report: RasReport, stalled: bool) -> tuple[str, list[str]]:
    """(state, reasons) for a parsed report."""
    reasons = degradations(report)
    if stalled:
        return "stalled", ["no_progress", *reasons]
    return ("degraded" if reasons else "healthy"), reasons


def elect_reporter(report: RasReport, local: Iterable[str]) -> bool | None:
    """True when the lowest responding node address is local; None when nobody can be elected.

    Only nodes with a responding rank are candidates, so when the reporter's
    node disappears or goes missing the next-lowest node takes over. Only a
    JSON report lists every responding rank's node; a text report names nodes
    only on error and warning lines (a lagging rank, a failed one), so electing
    from it would hand the role to whichever node had a problem: None.
    """
    if report.format != "json":
        return None
    lowest = lowest_host(report.responding_hosts)
    if lowest is None:
        return None
    return normalize(lowest) in {normalize(h) for h in local}


@dataclass
class StateMachine:
    """The state of one address and its transitions (counted, never reset)."""

    state: str = ""
    transitions: dict[tuple[str, str], int] = field(default_factory=dict)

    def move(self, new: str) -> str | None:
        """Enter ``new``; the previous state when this is a transition, else None."""
        old = self.state
        self.state = new
        if not old or old == new:
            return None
        key = (old, new)
        self.transitions[key] = self.transitions.get(key, 0) + 1
        return old
