"""One typed model of a RAS report, whichever format (text or JSON) it came in.

The two formats do not carry the same detail. JSON (NCCL 2.28.7+) lists every
rank of every communicator with its status flags and per-collective operation
counts, but has no job summary and no DEAD list. Text has a job summary, a
table of communicator *groups*, and names a communicator (by hash) only when it
has an error or a warning; per-rank detail is printed for outliers only. The
model keeps what both say in the same fields and leaves the rest empty, so
consumers never need to know which format a report came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# NCCL_NUM_FUNCTIONS is 5 in every NCCL and RCCL release with RAS, in this order.
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
# NCCL 2.24/2.25 text reports keep one operation count over every collective type.
ANY_COLLECTIVE = "Any"
# major.minor of a version string such as "2.24.3" or "2.26.2+cuda12.4".
_RELEASE = re.compile(r"^(\d{1,4})\.(\d{1,4})\b")
# Communicator status words in increasing precedence: a communicator shows the
# highest one over its ranks (NCCL keeps a bitmask and prints its top bit).
STATUSES = ("NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT")
STATUS_RANK = {name: i for i, name in enumerate(STATUSES)}
# ncclResult_t values that are not errors.
NCCL_SUCCESS = 0
NCCL_IN_PROGRESS = 7
# NCCL prints every number of a report with %d, %ld or %lu: anything outside the
# 64-bit range is corrupt, and would not even convert to a float once exported.
INT_MIN = -(1 << 63)
INT_LIMIT = 1 << 64


class RasParseError(ValueError):
    """A RAS report could not be parsed; the message says what and where."""


def checked_int(value: int, what: str) -> int:
    """``value`` when NCCL could have printed it (64-bit range), else RasParseError."""
    if not INT_MIN <= value < INT_LIMIT:
        raise RasParseError(f"{what}: integer out of the 64-bit range")
    return value


def hash_label(value: int) -> str:
    """A communicator hash as 16 lowercase hex digits, zero-padded, no ``0x``."""
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def is_error_result(code: int) -> bool:
    """True for an ncclResult_t that RAS counts as an error (not success, not in progress)."""
    return code not in (NCCL_SUCCESS, NCCL_IN_PROGRESS)


@dataclass(frozen=True, slots=True)
class Process:
    """One NCCL process as RAS names it: node address, pid, GPUs it manages."""

    host: str
    pid: int | None = None
    gpus: str = ""


@dataclass(frozen=True, slots=True)
class RankRef:
    """Where a communicator rank lives; empty host / None when RAS did not know."""

    rank: int
    host: str = ""
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None


@dataclass(frozen=True, slots=True)
class Rank:
    """A rank that answered the RAS collective (JSON reports list every one)."""

    ref: RankRef
    init_state: int = NCCL_SUCCESS
    async_error: int = NCCL_SUCCESS
    finalize_called: bool = False
    destroy_flag: bool = False
    abort_flag: bool = False
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """The status word NCCL derives from the flags (same rule as the text report)."""
        if self.abort_flag:
            return "ABORT"
        if self.finalize_called or self.destroy_flag:
            return "FINALIZE"
        if self.init_state == NCCL_SUCCESS:
            return "RUNNING"
        return "INIT"


@dataclass(frozen=True, slots=True)
class MissingRank:
    """A rank RAS has no data from.

    ``unresponsive`` False means the process answered but says it is not a member
    (shown as NOCOMM: the communicator is being created or torn down there).
    """

    ref: RankRef
    unresponsive: bool = True
    considered_dead: bool = False


@dataclass(frozen=True)
class Communicator:
    """One communicator, with whatever the report said about it.

    ``missing_count`` counts every missing rank: ``unresponsive_ranks`` whose
    process did not answer, plus NOCOMM ones. It can exceed ``len(missing)``:
    text reports list only outliers. ``op_range`` is the (lowest, highest) operation count per
    collective over the ranks that reported: from every rank in JSON, from the
    MISMATCH warning in text (a communicator named in a text report without a
    count mismatch has equal counts, which the text does not print).
    """

    hash: int
    size: int | None = None
    status: str = ""
    nodes: int | None = None
    ranks: tuple[Rank, ...] = ()
    missing: tuple[MissingRank, ...] = ()
    missing_count: int = 0
    unresponsive_ranks: int = 0
    op_range: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    init_error_ranks: int = 0
    async_error_ranks: int = 0
    status_mismatch: bool = False
    errors: frozenset[str] = frozenset()
    label: str = ""
    secondary_hash: str = ""

    @property
    def hash_label(self) -> str:
        """The hash as exported in the ``comm`` label."""
        return hash_label(self.hash)

    def op_skew(self) -> dict[str, int]:
        """Max minus min operation count per collective over the ranks that reported."""
        return {name: high - low for name, (low, high) in self.op_range.items()}


@dataclass(frozen=True, slots=True)
class Group:
    """One row of the text report's communicator table."""

    index: int
    comms: int
    nodes_per_comm: int
    ranks_per_node_min: int
    ranks_per_node_max: int
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: frozenset[str]


@dataclass(frozen=True, slots=True)
class JobSummary:
    """Job size: nodes, NCCL processes, GPUs (dead processes included, as RAS counts them)."""

    nodes: int
    processes: int
    gpus: int


@dataclass(frozen=True)
class RasReport:
    """Everything a STATUS / VERBOSE STATUS report says about the job."""

    format: str
    library: str = "nccl"
    version: str = ""
    runtime_version: int | None = None
    driver_version: int | None = None
    timestamp: str = ""
    summary: JobSummary | None = None
    communicators_total: int = 0
    groups: tuple[Group, ...] = ()
    communicators: tuple[Communicator, ...] = ()
    missing_processes: tuple[Process, ...] = ()
    missing_process_count: int = 0
    dead_processes: tuple[Process, ...] = ()
    dead_process_count: int = 0
    timeouts: int = 0
    collection_seconds: float | None = None
    responding_hosts: frozenset[str] = frozenset()
    missing_hosts: frozenset[str] = frozenset()
    unparsed_lines: int = 0

    @property
    def running(self) -> bool:
        """True when some communicator is RUNNING (the state in which a stall is a hang)."""
        if any(g.status == "RUNNING" for g in self.groups):
            return True
        return any(c.status == "RUNNING" for c in self.communicators)

    @property
    def one_count_per_communicator(self) -> bool:
        """True for NCCL/RCCL 2.24 and 2.25 text: one operation count over every collective.

        Those releases print ``different collective operation counts`` where
        2.26+ name the collective, so their skew exists only as ``Any``.
        """
        if self.format != "text":
            return False
        if any(ANY_COLLECTIVE in c.op_range for c in self.communicators):
            return True
        release = _RELEASE.match(self.version)
        return release is not None and (int(release[1]), int(release[2])) < (2, 26)

    @property
    def has_rank_counts(self) -> bool:
        """True when the report lists every responding rank's operation counts (JSON)."""
        return any(c.ranks for c in self.communicators)
