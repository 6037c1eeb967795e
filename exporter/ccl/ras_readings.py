"""Readings for one RAS report (pure): job, communicator and rank series.

Which series exist depends on the exporter's role for the job: the reporter
exports job- and communicator-level series, every exporter exports the rank
series its ``rank_series`` setting selects. Nothing here keeps state.

The communicator and rank families have a series budget (their catalog rows'
``max_series``, :mod:`exporter.catalog.budget`) that the store enforces by keeping
the first label sets a snapshot holds. A report with more communicators than
``RAS_COMMS`` therefore lists them worst first (:func:`worst_first`: most missing
ranks, then most ranks in error, then the largest operation-count skew, then the
hash), so the series kept are those of the communicators to look at; a report
within the budget keeps the report's order, so its exposition does not change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from exporter.catalog import budget
from exporter.ccl.ras_model import ANY_COLLECTIVE, COLLECTIVES, Communicator, RankRef, RasReport
from exporter.ccl.ras_state import REPORTED, STATES
from exporter.family_names import (
    ACCEL_CCL_COMM_MISSING_RANKS,
    ACCEL_CCL_COMM_OP_SKEW,
    ACCEL_CCL_COMM_RANKS,
    ACCEL_CCL_COMMUNICATORS,
    ACCEL_CCL_JOB_DEAD_PROCESSES,
    ACCEL_CCL_JOB_GPUS,
    ACCEL_CCL_JOB_MISSING_PROCESSES,
    ACCEL_CCL_JOB_NODES,
    ACCEL_CCL_JOB_PROCESSES,
    ACCEL_CCL_JOB_STATE,
    ACCEL_CCL_JOB_STATE_REASON_INFO,
    ACCEL_CCL_RANK_COLLECTIVE_OPS_TOTAL,
    ACCEL_CCL_RANK_DEVICE_INFO,
    ACCEL_CCL_RAS_COLLECTION_SECONDS,
    ACCEL_CCL_RAS_UP,
)
from exporter.model import Reading

RankFilter = Callable[[RankRef], bool]


def _badness(comm: Communicator) -> tuple[int, int, int, str]:
    skews = comm.op_skew().values()
    return (
        -comm.missing_count,
        -(comm.init_error_ranks + comm.async_error_ranks),
        -max(skews, default=0),
        comm.hash_label,
    )


def worst_first(report: RasReport) -> Sequence[Communicator]:
    """The report's communicators, worst first when there are more than the budget keeps."""
    if len(report.communicators) <= budget.RAS_COMMS:
        return report.communicators
    return sorted(report.communicators, key=_badness)


def state_readings(address: str, state: str, reasons: list[str]) -> list[Reading]:
    """``ras_up``, the one-hot state and the reasons it is not healthy."""
    out = [Reading(ACCEL_CCL_RAS_UP, (address,), 1.0 if state in REPORTED else 0.0)]
    out.extend(
        Reading(ACCEL_CCL_JOB_STATE, (address, name), 1.0 if name == state else 0.0)
        for name in STATES
    )
    out.extend(
        Reading(ACCEL_CCL_JOB_STATE_REASON_INFO, (address, reason), 1.0)
        for reason in dict.fromkeys(reasons)
    )
    return out


def _skews(comm: Communicator, report: RasReport) -> dict[str, int]:
    skews = comm.op_skew()
    if report.format != "text":
        return skews
    # A text report names a communicator only for an error or warning and prints
    # operation counts only where they differ: the collectives it does not list
    # are in step. 2.24/2.25 keep one count for all of them, so that the label
    # set stays the same whether or not a count differs.
    names = (ANY_COLLECTIVE,) if report.one_count_per_communicator else COLLECTIVES
    return {name: skews.get(name, 0) for name in (*names, *skews)}


def job_readings(address: str, report: RasReport) -> list[Reading]:
    """Job- and communicator-level series (exported by the reporter only)."""
    a = (address,)
    out: list[Reading] = []
    if report.summary is not None:
        out.append(Reading(ACCEL_CCL_JOB_NODES, a, float(report.summary.nodes)))
        out.append(Reading(ACCEL_CCL_JOB_PROCESSES, a, float(report.summary.processes)))
        out.append(Reading(ACCEL_CCL_JOB_GPUS, a, float(report.summary.gpus)))
    out.append(Reading(ACCEL_CCL_JOB_MISSING_PROCESSES, a, float(report.missing_process_count)))
    out.append(Reading(ACCEL_CCL_JOB_DEAD_PROCESSES, a, float(report.dead_process_count)))
    out.append(Reading(ACCEL_CCL_COMMUNICATORS, a, float(report.communicators_total)))
    if report.collection_seconds is not None:
        out.append(Reading(ACCEL_CCL_RAS_COLLECTION_SECONDS, a, report.collection_seconds))
    for comm in worst_first(report):
        labels = (address, comm.hash_label)
        if comm.size is not None:
            out.append(Reading(ACCEL_CCL_COMM_RANKS, labels, float(comm.size)))
        out.append(Reading(ACCEL_CCL_COMM_MISSING_RANKS, labels, float(comm.missing_count)))
        for name, skew in _skews(comm, report).items():
            out.append(Reading(ACCEL_CCL_COMM_OP_SKEW, (*labels, name), float(skew)))
    return out


def rank_readings(address: str, report: RasReport, keep: RankFilter) -> list[Reading]:
    """Per-rank operation counters for the ranks ``keep`` selects (JSON reports only)."""
    out: list[Reading] = []
    for comm in worst_first(report):
        label = comm.hash_label
        for rank in comm.ranks:
            if not keep(rank.ref):
                continue
            number = str(rank.ref.rank)
            for name, count in rank.counts.items():
                out.append(
                    Reading(
                        ACCEL_CCL_RANK_COLLECTIVE_OPS_TOTAL,
                        (address, label, number, name),
                        float(count),
                    )
                )
    return out


def rank_device_readings(
    address: str, report: RasReport, keep: RankFilter, uuid_of: Mapping[int, str]
) -> list[Reading]:
    """``accel_ccl_rank_device_info`` of the ranks ``keep`` selects whose GPU RAS names.

    Answering and missing ranks alike (a stalled rank is the one to find); ``uuid_of``
    maps a device index to its uuid ("" when the device source does not know it).
    """
    out: list[Reading] = []
    for comm in worst_first(report):
        refs = [r.ref for r in comm.ranks] + [m.ref for m in comm.missing]
        for ref in refs:
            if ref.nvml_dev is None or ref.nvml_dev < 0 or not keep(ref):
                continue
            labels = (
                address,
                comm.hash_label,
                str(ref.rank),
                str(ref.nvml_dev),
                uuid_of.get(ref.nvml_dev, ""),
                "" if ref.pid is None else str(ref.pid),
            )
            out.append(Reading(ACCEL_CCL_RANK_DEVICE_INFO, labels, 1.0))
    return out
