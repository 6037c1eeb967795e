"""Pure parsing and aggregation of NCCL/RCCL Inspector records (one JSON object per line).

A record (``inspector_output_format_version`` "v4.0" in every release) has a
``header`` (communicator hash ``id``, ``rank``, ``n_ranks``), ``metadata`` and
either ``coll_perf`` or ``p2p_perf`` (2.30+). Only records timed on the GPU
(``kernel_gpu``) with a non-zero time feed the statistics; records whose bus
bandwidth exceeds the configured link peak are not used either (RCCL 2.28.3's
plugin reports 10x too much) and flag their communicator.

Stragglers: ``coll_sn`` is the same on every rank for one collective, so the
records of one (communicator, coll_sn) from all local ranks form a group. A
group's skew is its longest over its shortest kernel time, and its straggler
is the rank furthest from the median - usually the one with the *shortest*
time, because the others' kernels wait for the rank that arrives last.

Each rank's most recent records are kept per communicator (at most
``MAX_RECENT`` per rank); after each batch of lines the ``coll_sn`` that every
local rank recorded form the groups, evaluated in order (the last one sets the
straggler). That works whether the files were read one after the other or not.
Groups complete when every local rank recorded the same collective, which
NCCL 2.30+ does (each dump drains a ring of every completed operation). Before
2.30 (and in RCCL) each process's dump thread writes only its communicator's
latest operation, at its own moment, so the ranks' records rarely share a
``coll_sn``. A collective that every local rank has moved past while one of
them - whose records are all still known from before it - never recorded it
will never complete: it is counted (``incomplete_groups``). When no group
completed in a batch but some proved incomplete, the straggler and skew are
taken from a weaker comparison: each local rank's latest kernel time, in that
batch, for the same collective and message size bucket (different instances of
one recurring operation), and the communicator is flagged as ``sampled``.

All state is bounded: communicators beyond ``max_comms`` are forgotten least
recently seen first; the (communicator, collective, message size) label sets of
all communicators together are capped at ``max_series`` (records that would
add one more are counted as ``series_limit`` and not used); per communicator
the collectives, ranks and recent records are capped; and every integer must
fit the 64 bits the plugin writes, so message size buckets stay below 2**64.
"""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from exporter.catalog.ccl import BANDWIDTH_BUCKETS, DURATION_BUCKETS
from exporter.ccl.ras_model import hash_label
from exporter.family_names import (
    ACCEL_CCL_BANDWIDTH_IMPLAUSIBLE,
    ACCEL_CCL_COLLECTIVE_BUS_BANDWIDTH_BYTES_PER_SECOND,
    ACCEL_CCL_COLLECTIVE_DURATION_SECONDS,
    ACCEL_CCL_COLLECTIVE_SKEW_RATIO,
    ACCEL_CCL_INSPECTOR_INCOMPLETE_GROUPS_TOTAL,
    ACCEL_CCL_INSPECTOR_LINES_TOTAL,
    ACCEL_CCL_RANK_BUS_BANDWIDTH_BYTES_PER_SECOND,
    ACCEL_CCL_STRAGGLER_RANK,
    ACCEL_CCL_STRAGGLER_SAMPLED,
)
from exporter.model import Reading
from exporter.store import HistogramAccumulator

OUTCOMES = (
    "used",
    "not_kernel_gpu",
    "zero_time",
    "implausible",
    "duplicate",
    "malformed",
    "series_limit",
    "other",
)
MAX_COLLECTIVES = 16
MAX_RANKS = 1024
# Records kept per rank and communicator for matching coll_sn across ranks.
MAX_RECENT = 256
# The plugin writes its integers as 64-bit unsigned (jsonUint64 / %lu).
INT_LIMIT = 1 << 64
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


class InspectorParseError(ValueError):
    """A line is not an Inspector record."""


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One completed operation of one rank."""

    comm: int
    rank: int
    n_ranks: int
    kind: str  # "coll" or "p2p"
    op: str
    sn: int
    msg_bytes: int
    exec_us: int
    timing: str
    busbw_gbs: float


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < INT_LIMIT:
        raise InspectorParseError(f"{key}: expected an unsigned 64-bit integer")
    return value


def _number(obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InspectorParseError(f"{key}: expected a number")
    if isinstance(value, int) and not -INT_LIMIT < value < INT_LIMIT:
        raise InspectorParseError(f"{key}: number out of range")
    number = float(value)
    # Python's json takes NaN and Infinity, which the plugin's %lf never writes.
    if not math.isfinite(number):
        raise InspectorParseError(f"{key}: expected a finite number")
    return number


def parse_record(line: bytes | str) -> OpRecord | None:
    """The operation a line describes; None for a valid record of another kind.

    Raises InspectorParseError for anything that is not a record.
    """
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        raise InspectorParseError("not JSON") from None
    if not isinstance(value, dict) or not isinstance(value.get("header"), dict):
        raise InspectorParseError("no header object")
    header = value["header"]
    comm_id = header.get("id")
    if not isinstance(comm_id, str):
        raise InspectorParseError("header.id: expected a string")
    try:
        comm = int(comm_id, 16)
    except ValueError:
        raise InspectorParseError("header.id: not hexadecimal") from None
    if not 0 <= comm < 1 << 64:
        raise InspectorParseError("header.id: out of range")
    for kind in ("coll", "p2p"):
        perf = value.get(f"{kind}_perf")
        if perf is None:
            continue
        if not isinstance(perf, dict):
            raise InspectorParseError(f"{kind}_perf: expected an object")
        op = perf.get(kind)
        if not isinstance(op, str):
            raise InspectorParseError(f"{kind}_perf.{kind}: expected a string")
        timing = perf.get(f"{kind}_timing_source", "")
        return OpRecord(
            comm=comm,
            rank=_int(header, "rank"),
            n_ranks=_int(header, "n_ranks"),
            kind=kind,
            op=op,
            sn=_int(perf, f"{kind}_sn"),
            msg_bytes=_int(perf, f"{kind}_msg_size_bytes"),
            exec_us=_int(perf, f"{kind}_exec_time_us"),
            timing=timing if isinstance(timing, str) else "",
            busbw_gbs=_number(perf, f"{kind}_busbw_gbs"),
        )
    return None


def size_bucket(size: int) -> str:
    """The message size rounded up to a power of two, in bytes, as a label value."""
    if size <= 0:
        return "0"
    return str(1 << (size - 1).bit_length())


@dataclass
class _Series:
    bandwidth: HistogramAccumulator = field(
        default_factory=lambda: HistogramAccumulator(BANDWIDTH_BUCKETS)
    )
    duration: HistogramAccumulator = field(
        default_factory=lambda: HistogramAccumulator(DURATION_BUCKETS)
    )


@dataclass
class _Comm:
    series: dict[tuple[str, str], _Series] = field(default_factory=dict)
    rank_bandwidth: dict[tuple[int, str], float] = field(default_factory=dict)
    local_ranks: set[int] = field(default_factory=set)
    # Per local rank: its latest records, coll_sn -> (collective, kernel time), in order.
    recent: dict[int, OrderedDict[int, tuple[str, int]]] = field(default_factory=dict)
    # Per local rank: its records from this coll_sn on are all in ``recent`` (or matched).
    known_from: dict[int, int] = field(default_factory=dict)
    # Per local rank: the coll_sn of its latest record.
    latest: dict[int, int] = field(default_factory=dict)
    # This batch: each rank's latest kernel time per (collective, size bucket).
    window: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    skew: dict[str, float] = field(default_factory=dict)
    straggler: int | None = None
    sampled: bool = False
    implausible: bool = False
    last_sn: dict[tuple[str, int, str], int] = field(default_factory=dict)


def straggler_of(times: dict[int, int]) -> tuple[int, float]:
    """(straggler rank, max/min ratio) of one group's kernel times (all > 0, two or more)."""
    ordered = sorted(times.items(), key=lambda kv: (kv[1], kv[0]))
    low_rank, low = ordered[0]
    high_rank, high = ordered[-1]
    values = [t for _, t in ordered]
    middle = len(values) // 2
    median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    # On a tie (always with two ranks) the shortest time wins: arriving late is the
    # common cause of skew, and it shows as the shortest kernel.
    rank = low_rank if median - low >= high - median else high_rank
    return rank, high / low


def _sampled(state: _Comm) -> bool:
    """Straggler and skew from each rank's latest time per (collective, size); True if any."""
    largest: dict[str, tuple[int, dict[int, int]]] = {}
    for (op, size), times in state.window.items():
        if not state.local_ranks <= times.keys():
            continue
        # The largest message of a collective type: the least latency-bound comparison.
        if op not in largest or int(size) > largest[op][0]:
            largest[op] = (int(size), times)
    for op, (_, times) in largest.items():
        state.skew[op] = straggler_of(times)[1]
    if not largest:
        return False
    _, times = max(largest.values(), key=lambda entry: entry[0])
    state.straggler = straggler_of(times)[0]
    return True


class InspectorAggregator:
    """Accumulates records into bounded statistics (see the module doc for the bounds)."""

    def __init__(
        self, link_peak_bytes_per_second: float, max_comms: int, max_series: int = 512
    ) -> None:
        self.link_peak = link_peak_bytes_per_second
        self.max_comms = max_comms
        self.max_series = max_series
        self._comms: OrderedDict[int, _Comm] = OrderedDict()
        self._series_count = 0
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.incomplete_groups = 0

    def _comm(self, comm: int) -> _Comm:
        state = self._comms.get(comm)
        if state is None:
            state = _Comm()
            self._comms[comm] = state
            while len(self._comms) > self.max_comms:
                _, gone = self._comms.popitem(last=False)
                self._series_count -= len(gone.series)
        else:
            self._comms.move_to_end(comm)
        return state

    def add_line(self, source: str, line: bytes) -> str:
        """Parse and account one line of file ``source``; the outcome it was counted under."""
        try:
            record = parse_record(line)
        except InspectorParseError:
            return self._count("malformed")
        if record is None:
            return self._count("other")
        return self._count(self.add(record, source))

    def _count(self, outcome: str) -> str:
        self.outcomes[outcome] += 1
        return outcome

    def add(self, record: OpRecord, source: str = "") -> str:
        """Account one record (not counted in outcomes); its outcome."""
        if record.timing != "kernel_gpu":
            return "not_kernel_gpu"
        if record.exec_us == 0:
            return "zero_time"
        state = self._comm(record.comm)
        key = (source, record.rank, record.kind)
        if state.last_sn.get(key) == record.sn:
            return "duplicate"
        if key in state.last_sn or len(state.last_sn) < MAX_RANKS:
            state.last_sn[key] = record.sn
        bandwidth = record.busbw_gbs * 1e9
        if bandwidth > self.link_peak:
            state.implausible = True
            return "implausible"
        op = self._label(state, record.op)
        series_key = (op, size_bucket(record.msg_bytes))
        series = state.series.get(series_key)
        if series is None:
            if self._series_count >= self.max_series:
                return "series_limit"
            series = state.series[series_key] = _Series()
            self._series_count += 1
        if bandwidth > 0:
            series.bandwidth.observe(bandwidth)
            rank_key = (record.rank, op)
            if rank_key in state.rank_bandwidth or len(state.rank_bandwidth) < MAX_RANKS:
                state.rank_bandwidth[rank_key] = bandwidth
        series.duration.observe(record.exec_us / 1e6)
        if record.kind == "coll":
            self._group(state, record, series_key)
        return "used"

    def _label(self, state: _Comm, op: str) -> str:
        if not _NAME.match(op):
            return "other"
        known = {name for name, _ in state.series}
        if op not in known and len(known) >= MAX_COLLECTIVES:
            return "other"
        return op

    def _group(self, state: _Comm, record: OpRecord, series_key: tuple[str, str]) -> None:
        if record.rank not in state.local_ranks:
            if len(state.local_ranks) >= MAX_RANKS:
                return
            state.local_ranks.add(record.rank)
            state.known_from[record.rank] = record.sn
        recent = state.recent.setdefault(record.rank, OrderedDict())
        recent[record.sn] = (series_key[0], record.exec_us)
        recent.move_to_end(record.sn)  # records come in completion order: this is the latest
        state.latest[record.rank] = record.sn
        if len(recent) > MAX_RECENT:
            dropped, _ = recent.popitem(last=False)
            state.known_from[record.rank] = max(state.known_from[record.rank], dropped + 1)
        state.window.setdefault(series_key, {})[record.rank] = record.exec_us

    def finish(self) -> None:
        """Evaluate the groups of the batch of lines just added (call after each batch)."""
        for state in self._comms.values():
            if len(state.local_ranks) >= 2:
                self._evaluate(state)
            state.window.clear()

    def _evaluate(self, state: _Comm) -> None:
        ranks = sorted(state.local_ranks)
        recents = [state.recent.get(rank) or OrderedDict() for rank in ranks]
        common = set(recents[0]).intersection(*recents[1:])
        for sn in sorted(common):
            op = recents[0][sn][0]
            times = {rank: recent.pop(sn)[1] for rank, recent in zip(ranks, recents, strict=True)}
            state.straggler, state.skew[op] = straggler_of(times)
            state.sampled = False
        # Records below every rank's latest can no longer be matched: a rank that lacks
        # one it should have had (all its records since are known) never recorded it.
        low = min(state.latest[rank] for rank in ranks)
        below = {sn for recent in recents for sn in recent if sn < low}
        incomplete = sum(
            1
            for sn in below
            if any(
                sn not in recent and state.known_from[rank] <= sn
                for rank, recent in zip(ranks, recents, strict=True)
            )
        )
        for recent in recents:
            for sn in [sn for sn in recent if sn < low]:
                del recent[sn]
        self.incomplete_groups += incomplete
        if not common and incomplete and _sampled(state):
            state.sampled = True

    def readings(self) -> list[Reading]:
        """Every series, from the accumulated state."""
        out: list[Reading] = []
        for comm, state in self._comms.items():
            label = hash_label(comm)
            for (op, size), series in state.series.items():
                labels = (label, op, size)
                if series.bandwidth.value().count:
                    out.append(
                        Reading(
                            ACCEL_CCL_COLLECTIVE_BUS_BANDWIDTH_BYTES_PER_SECOND,
                            labels,
                            series.bandwidth.value(),
                        )
                    )
                out.append(
                    Reading(ACCEL_CCL_COLLECTIVE_DURATION_SECONDS, labels, series.duration.value())
                )
            for (rank, op), value in state.rank_bandwidth.items():
                out.append(
                    Reading(
                        ACCEL_CCL_RANK_BUS_BANDWIDTH_BYTES_PER_SECOND,
                        (label, str(rank), op),
                        value,
                    )
                )
            if state.straggler is not None:
                out.append(Reading(ACCEL_CCL_STRAGGLER_RANK, (label,), float(state.straggler)))
                out.append(
                    Reading(ACCEL_CCL_STRAGGLER_SAMPLED, (label,), 1.0 if state.sampled else 0.0)
                )
            for op, ratio in state.skew.items():
                out.append(Reading(ACCEL_CCL_COLLECTIVE_SKEW_RATIO, (label, op), ratio))
            out.append(
                Reading(
                    ACCEL_CCL_BANDWIDTH_IMPLAUSIBLE, (label,), 1.0 if state.implausible else 0.0
                )
            )
        out.extend(
            Reading(ACCEL_CCL_INSPECTOR_LINES_TOTAL, (outcome,), float(count))
            for outcome, count in self.outcomes.items()
        )
        out.append(
            Reading(ACCEL_CCL_INSPECTOR_INCOMPLETE_GROUPS_TOTAL, (), float(self.incomplete_groups))
        )
        return out

    def comms(self) -> Iterable[int]:
        """Communicators currently tracked (for /status and tests)."""
        return list(self._comms)
