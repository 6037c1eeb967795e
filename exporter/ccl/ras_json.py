"""Parser for the JSON STATUS report (``SET FORMAT json``, NCCL 2.28.7+).

The document lists every communicator with every responding rank (status flags,
per-collective operation counts) and every missing rank. Job-level numbers the
text report prints (nodes, processes, GPUs, missing and dead processes) are
derived here from the ranks so that both formats fill the same model.

NCCL 2.28.7 and 2.28.9 omit the comma after ``"nvml_dev": N`` inside
``missing_ranks`` objects, so their document is invalid exactly when a rank is
missing. The repair puts the comma back - first exactly there, then, if the
document is still invalid, between any value that ends a line and a
``"key":`` that starts the next one. Neither changes a valid pretty-printed
document, and both are tried only after a strict parse failed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from exporter.ccl.ras_model import (
    INT_LIMIT,
    INT_MIN,
    STATUS_RANK,
    Communicator,
    JobSummary,
    MissingRank,
    Process,
    Rank,
    RankRef,
    RasParseError,
    RasReport,
    is_error_result,
)

# The exact 2.28.7/2.28.9 defect: `"nvml_dev": N` ends its line in a missing_ranks
# object and the next line opens "status". A literal prefix keeps this cheap.
_NVML_WITHOUT_COMMA = re.compile(r'("nvml_dev": -?\d+)([ \t]*\r?\n[ \t]*"status"[ \t]*:)')
# Any line ending in a JSON value (digit, closing quote, true/false/null) followed
# by a line that starts a new key: the general form, tried when the exact one was
# not enough (a build with the defect elsewhere).
_MISSING_COMMA = re.compile(r'(?<=[0-9"el])([ \t]*\r?\n[ \t]*"[^"\n]*"[ \t]*:)')
MAX_COLLECTIVE_NAMES = 16
_COLLECTIVE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
# HIP runtime versions are major*10,000,000 + minor*100,000 + patch; CUDA's are
# major*1000 + minor*10. A version this large can only come from RCCL.
_HIP_VERSION_FLOOR = 1_000_000


def _exact_repair(text: str) -> str:
    return _NVML_WITHOUT_COMMA.sub(r"\1,\2", text)


def _general_repair(text: str) -> str:
    return _MISSING_COMMA.sub(r",\1", text)


def repair_missing_commas(text: str) -> str:
    """Insert the commas NCCL 2.28.7/2.28.9 leave out before a following key."""
    return _general_repair(_exact_repair(text))


def _strict(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _loads(text: str) -> Any:
    try:
        return _strict(text)
    except ValueError as exc:
        error: ValueError = exc
    for repair in (_exact_repair, _general_repair):
        repaired = repair(text)
        if repaired == text:
            continue
        text = repaired
        try:
            return _strict(text)
        except ValueError as exc:
            error = exc
    raise RasParseError(f"invalid JSON: {error}")


_MISSING = object()


class _Fields:
    """Typed access to one JSON object; errors name the object's path.

    The path is built only when an error needs it: a 4,096-rank report has
    tens of thousands of objects and formatting every path would dominate.
    """

    __slots__ = ("key", "parent", "value")

    def __init__(self, value: Any, parent: _Fields | None = None, key: str | int = "$") -> None:
        self.value: dict[str, Any] = value
        self.parent = parent
        self.key = key
        if type(value) is not dict:
            raise RasParseError(f"{self.path}: expected an object, got {type(value).__name__}")

    @property
    def path(self) -> str:
        """``$.communicators[0].ranks[3]`` style location of this object."""
        if self.parent is None:
            return str(self.key)
        step = f"[{self.key}]" if isinstance(self.key, int) else f".{self.key}"
        return self.parent.path + step

    def _get(self, key: str, default: Any) -> Any:
        value = self.value.get(key, default)
        if value is _MISSING:
            raise RasParseError(f"{self.path}: missing key {key!r}")
        return value

    def get_int(self, key: str, default: Any = _MISSING) -> int:
        value = self._get(key, default)
        if type(value) is not int:
            raise RasParseError(f"{self.path}.{key}: expected an integer, got {value!r:.40}")
        if not INT_MIN <= value < INT_LIMIT:  # inline: this runs for every field of every rank
            raise RasParseError(f"{self.path}.{key}: integer out of the 64-bit range")
        return value

    def get_bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, default)
        if type(value) is not bool:
            raise RasParseError(f"{self.path}.{key}: expected true or false, got {value!r:.40}")
        return value

    def get_str(self, key: str, default: Any = _MISSING) -> str:
        value = self._get(key, default)
        if type(value) is not str:
            raise RasParseError(f"{self.path}.{key}: expected a string, got {value!r:.40}")
        return value

    def get_number(self, key: str, default: Any = _MISSING) -> float:
        value = self._get(key, default)
        if type(value) is int:
            if not INT_MIN <= value < INT_LIMIT:
                raise RasParseError(f"{self.path}.{key}: integer out of the 64-bit range")
            return float(value)
        # Python's json accepts NaN and Infinity, which NCCL never writes.
        if type(value) is not float or not math.isfinite(value):
            raise RasParseError(f"{self.path}.{key}: expected a number, got {value!r:.40}")
        return value

    def get_list(self, key: str) -> list[Any]:
        value = self._get(key, [])
        if type(value) is not list:
            raise RasParseError(f"{self.path}.{key}: expected a list, got {type(value).__name__}")
        return value

    def get_obj(self, key: str, default: Any = _MISSING) -> _Fields:
        return _Fields(self._get(key, default), self, key)

    def items(self, key: str) -> list[_Fields]:
        """The objects of the list at ``key``."""
        entries = self.get_list(key)
        owner = _Fields.__new__(_Fields)
        owner.value, owner.parent, owner.key = {}, self, key
        return [_Fields(entry, owner, i) for i, entry in enumerate(entries)]


def _hash(text: str, path: str) -> int:
    try:
        value = int(text, 16)
    except ValueError:
        raise RasParseError(f"{path}: communicator hash {text!r:.40} is not hexadecimal") from None
    if not 0 <= value < 1 << 64:
        raise RasParseError(f"{path}: communicator hash {text!r:.40} is out of range")
    return value


def _ref(item: _Fields) -> RankRef:
    host = item.get_str("host", "")
    pid = item.get_int("pid", -1)
    return RankRef(
        rank=item.get_int("rank"),
        host="" if host == "unknown" else host,
        pid=None if pid < 0 else pid,
        cuda_dev=item.get_int("cuda_dev", -1),
        nvml_dev=item.get_int("nvml_dev", -1),
    )


def _counts(item: _Fields) -> dict[str, int]:
    counts = item.get_obj("collective_counts", {})
    # The names become label values: only a handful of identifiers are accepted.
    if len(counts.value) > MAX_COLLECTIVE_NAMES:
        raise RasParseError(f"{counts.path}: more than {MAX_COLLECTIVE_NAMES} collective types")
    for name, value in counts.value.items():
        if type(value) is not int or not 0 <= value < INT_LIMIT:
            raise RasParseError(f"{counts.path}.{name}: expected a 64-bit count, got {value!r:.40}")
        if not _COLLECTIVE_NAME.match(name):
            raise RasParseError(f"{counts.path}: {name[:40]!r} is not a collective name")
    return counts.value


def _rank(item: _Fields) -> Rank:
    status = item.get_obj("status")
    return Rank(
        ref=_ref(item),
        init_state=status.get_int("init_state", 0),
        async_error=status.get_int("async_error", 0),
        finalize_called=status.get_bool("finalize_called", False),
        destroy_flag=status.get_bool("destroy_flag", False),
        abort_flag=status.get_bool("abort_flag", False),
        counts=_counts(item),
    )


def _missing(item: _Fields) -> MissingRank:
    status = item.get_obj("status", {})
    return MissingRank(
        ref=_ref(item),
        unresponsive=status.get_bool("unresponsive", True),
        considered_dead=status.get_bool("considered_dead", False),
    )


def _communicator(item: _Fields) -> Communicator:
    ranks = tuple(_rank(r) for r in item.items("ranks"))
    missing = tuple(_missing(m) for m in item.items("missing_ranks"))
    statuses = {r.status for r in ranks}
    if any(not m.unresponsive for m in missing):
        statuses.add("NOCOMM")
    names: dict[str, list[int]] = {}
    for rank in ranks:
        for name, count in rank.counts.items():
            names.setdefault(name, []).append(count)
    hosts = {r.ref.host for r in ranks if r.ref.host} | {m.ref.host for m in missing if m.ref.host}
    size = item.get_int("size", len(ranks) + len(missing))
    # A rank neither reported nor listed missing is missing all the same (RCCL 2.28.9
    # can count a missing rank in missing_ranks_count without listing it).
    missing_count = max(len(missing), item.get_int("missing_ranks_count", 0), size - len(ranks), 0)
    return Communicator(
        hash=_hash(item.get_str("hash"), f"{item.path}.hash"),
        size=size,
        status=max(statuses, key=STATUS_RANK.__getitem__) if statuses else "",
        nodes=len(hosts) or None,
        ranks=ranks,
        missing=missing,
        missing_count=missing_count,
        # An unlisted missing rank is taken as unresponsive: nothing says it answered.
        unresponsive_ranks=sum(1 for m in missing if m.unresponsive) + missing_count - len(missing),
        op_range={name: (min(values), max(values)) for name, values in names.items()},
        init_error_ranks=sum(1 for r in ranks if is_error_result(r.init_state)),
        async_error_ranks=sum(1 for r in ranks if is_error_result(r.async_error)),
        status_mismatch=len(statuses) > 1,
        secondary_hash=item.get_str("secondary_hash", ""),
    )


@dataclass(frozen=True)
class _Derived:
    """Job-level numbers the text report prints, derived from the ranks."""

    summary: JobSummary | None
    missing: tuple[Process, ...]
    dead: tuple[Process, ...]
    responding: frozenset[str]
    missing_hosts: frozenset[str]


def _derive(comms: tuple[Communicator, ...]) -> _Derived:
    nodes: set[str] = set()
    processes: set[tuple[str, int]] = set()
    gpus: set[tuple[str, int]] = set()
    responding: set[str] = set()
    missing_hosts: set[str] = set()
    missing: dict[tuple[str, int], Process] = {}
    dead: dict[tuple[str, int], Process] = {}
    for comm in comms:
        refs = [r.ref for r in comm.ranks]
        responding.update(ref.host for ref in refs if ref.host)
        for miss in comm.missing:
            ref = miss.ref
            refs.append(ref)
            if not ref.host or not (miss.unresponsive or miss.considered_dead):
                continue
            missing_hosts.add(ref.host)
            if ref.pid is not None:
                target = dead if miss.considered_dead else missing
                target.setdefault((ref.host, ref.pid), Process(ref.host, ref.pid))
        for ref in refs:
            if not ref.host:
                continue
            nodes.add(ref.host)
            if ref.pid is not None:
                processes.add((ref.host, ref.pid))
            if ref.nvml_dev is not None and ref.nvml_dev >= 0:
                gpus.add((ref.host, ref.nvml_dev))
    for key in dead:
        missing.pop(key, None)
    return _Derived(
        summary=JobSummary(len(nodes), len(processes), len(gpus)) if nodes else None,
        missing=tuple(missing[k] for k in sorted(missing)),
        dead=tuple(dead[k] for k in sorted(dead)),
        responding=frozenset(responding),
        missing_hosts=frozenset(missing_hosts),
    )


def _library(runtime: int | None) -> str:
    return "rccl" if runtime is not None and runtime >= _HIP_VERSION_FLOOR else "nccl"


def _optional(value: int) -> int | None:
    return value if value >= 0 else None


def parse_json(text: str) -> RasReport:
    """Parse a JSON report, repairing the 2.28.7/2.28.9 missing commas; RasParseError if not one."""
    document = _loads(text)
    root = _Fields(document)
    if "communicators" not in root.value or "nccl_version" not in root.value:
        raise RasParseError("$: not a RAS report (no 'nccl_version' or 'communicators')")
    comms = tuple(_communicator(c) for c in root.items("communicators"))
    ras = root.get_obj("ras", {})
    runtime = _optional(root.get_int("cuda_runtime_version", -1))
    derived = _derive(comms)
    return RasReport(
        format="json",
        library=_library(runtime),
        version=root.get_str("nccl_version"),
        runtime_version=runtime,
        driver_version=_optional(root.get_int("cuda_driver_version", -1)),
        timestamp=root.get_str("timestamp", ""),
        summary=derived.summary,
        communicators_total=root.get_int("communicators_count", len(comms)),
        communicators=comms,
        missing_processes=derived.missing,
        missing_process_count=len(derived.missing),
        dead_processes=derived.dead,
        dead_process_count=len(derived.dead),
        timeouts=ras.get_int("timeouts_count", 0),
        collection_seconds=(
            ras.get_number("collection_time_sec") if "collection_time_sec" in ras.value else None
        ),
        responding_hosts=derived.responding,
        missing_hosts=derived.missing_hosts,
    )
