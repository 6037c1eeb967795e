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

All state is bounded: communicators beyond ``max_comms`` are forgotten least
recently seen first, and per communicator the label sets (collective, message
size bucket, rank) and the pending groups are capped.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from exporter.catalog.ccl import BANDWIDTH_BUCKETS, DURATION_BUCKETS
from exporter.ccl.ras_model import hash_label
from exporter.model import Reading
from exporter.store import HistogramAccumulator

OUTCOMES = (
    "used",
    "not_kernel_gpu",
    "zero_time",
    "implausible",
    "duplicate",
    "malformed",
    "other",
)
MAX_COLLECTIVES = 16
MAX_RANKS = 1024
MAX_PENDING_GROUPS = 256
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
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InspectorParseError(f"{key}: expected a non-negative integer")
    return value


def _number(obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InspectorParseError(f"{key}: expected a number")
    return float(value)


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
    pending: OrderedDict[int, tuple[str, dict[int, int]]] = field(default_factory=OrderedDict)
    skew: dict[str, float] = field(default_factory=dict)
    straggler: int | None = None
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


class InspectorAggregator:
    """Accumulates records into bounded per-communicator statistics."""

    def __init__(self, link_peak_bytes_per_second: float, max_comms: int) -> None:
        self.link_peak = link_peak_bytes_per_second
        self.max_comms = max_comms
        self._comms: OrderedDict[int, _Comm] = OrderedDict()
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)

    def _comm(self, comm: int) -> _Comm:
        state = self._comms.get(comm)
        if state is None:
            state = _Comm()
            self._comms[comm] = state
            while len(self._comms) > self.max_comms:
                self._comms.popitem(last=False)
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
            series = state.series[series_key] = _Series()
        if bandwidth > 0:
            series.bandwidth.observe(bandwidth)
            rank_key = (record.rank, op)
            if rank_key in state.rank_bandwidth or len(state.rank_bandwidth) < MAX_RANKS:
                state.rank_bandwidth[rank_key] = bandwidth
        series.duration.observe(record.exec_us / 1e6)
        if record.kind == "coll":
            self._group(state, record, op)
        return "used"

    def _label(self, state: _Comm, op: str) -> str:
        if not _NAME.match(op):
            return "other"
        known = {name for name, _ in state.series}
        if op not in known and len(known) >= MAX_COLLECTIVES:
            return "other"
        return op

    def _group(self, state: _Comm, record: OpRecord, op: str) -> None:
        if len(state.local_ranks) < MAX_RANKS:
            state.local_ranks.add(record.rank)
        entry = state.pending.get(record.sn)
        if entry is None:
            entry = state.pending[record.sn] = (op, {})
            while len(state.pending) > MAX_PENDING_GROUPS:
                state.pending.popitem(last=False)
        entry[1][record.rank] = record.exec_us

    def finish(self) -> None:
        """Evaluate the groups every local rank has reported (call after each batch of lines)."""
        for state in self._comms.values():
            if len(state.local_ranks) < 2:
                continue
            done = [
                sn for sn, (_, times) in state.pending.items() if state.local_ranks <= times.keys()
            ]
            for sn in sorted(done):
                op, times = state.pending.pop(sn)
                state.straggler, state.skew[op] = straggler_of(times)

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
                            "accel_ccl_collective_bus_bandwidth_bytes_per_second",
                            labels,
                            series.bandwidth.value(),
                        )
                    )
                out.append(
                    Reading(
                        "accel_ccl_collective_duration_seconds", labels, series.duration.value()
                    )
                )
            for (rank, op), value in state.rank_bandwidth.items():
                out.append(
                    Reading(
                        "accel_ccl_rank_bus_bandwidth_bytes_per_second",
                        (label, str(rank), op),
                        value,
                    )
                )
            if state.straggler is not None:
                out.append(Reading("accel_ccl_straggler_rank", (label,), float(state.straggler)))
            for op, ratio in state.skew.items():
                out.append(Reading("accel_ccl_collective_skew_ratio", (label, op), ratio))
            out.append(
                Reading(
                    "accel_ccl_bandwidth_implausible", (label,), 1.0 if state.implausible else 0.0
                )
            )
        out.extend(
            Reading("accel_ccl_inspector_lines_total", (outcome,), float(count))
            for outcome, count in self.outcomes.items()
        )
        return out

    def comms(self) -> Iterable[int]:
        """Communicators currently tracked (for /status and tests)."""
        return list(self._comms)
