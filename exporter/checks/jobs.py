"""The NCCL/RCCL job check, from the RAS source's job state."""

from __future__ import annotations

from exporter.checks.nagios import Perf, Result, Status, worst
from exporter.checks.samples import Samples
from exporter.family_names import (
    ACCEL_CCL_JOB_DEAD_PROCESSES,
    ACCEL_CCL_JOB_MISSING_PROCESSES,
    ACCEL_CCL_JOB_STATE,
)

# Job state -> check status. A stalled job is the hang RAS itself reports as OK.
STATE_STATUS = {
    "healthy": Status.OK,
    "no_job": Status.OK,
    "degraded": Status.WARNING,
    "stalled": Status.CRITICAL,
    "unreachable": Status.UNKNOWN,
    "error": Status.UNKNOWN,
}


def ccl_job(samples: Samples, address: str = "") -> Result:
    """Worst job state over the RAS addresses; dead or missing processes are CRITICAL."""
    states = [
        (labels.get("address", ""), labels.get("state", ""))
        for labels, value in samples.get(ACCEL_CCL_JOB_STATE)
        if value == 1 and (not address or labels.get("address") == address)
    ]
    if not states:
        return Result(Status.UNKNOWN, "no NCCL/RCCL job state reported (is sources.ccl_ras on?)")
    dead = {lab.get("address", ""): v for lab, v in samples.get(ACCEL_CCL_JOB_DEAD_PROCESSES)}
    missing = {lab.get("address", ""): v for lab, v in samples.get(ACCEL_CCL_JOB_MISSING_PROCESSES)}
    statuses, parts, perf = [], [], []
    for addr, state in sorted(states):
        status = STATE_STATUS.get(state, Status.UNKNOWN)
        lost = dead.get(addr, 0) + missing.get(addr, 0)
        if state == "degraded" and lost > 0:
            status = Status.CRITICAL
        statuses.append(status)
        part = f"{addr} {state}"
        if lost:
            part += f" ({dead.get(addr, 0):g} dead, {missing.get(addr, 0):g} missing processes)"
        parts.append(part)
        # No report (unreachable, error, no job): the counts are unknown, not 0.
        perf.append(Perf(f"{addr}_dead", dead.get(addr), crit="0", minimum=0))
        perf.append(Perf(f"{addr}_missing", missing.get(addr), crit="0", minimum=0))
    return Result(worst(statuses), "; ".join(parts), perf)
