"""Parser for the text STATUS / VERBOSE STATUS report (every NCCL/RCCL release with RAS).

The report is a banner, a job summary (one of three table shapes), the
communicator group table, then ``Errors`` and ``Warnings`` sections made of
blocks: a header at column 0 (``INCOMPLETE``, ``DEAD``, ``TIMEOUT`` or
``#<group>-<i> (<hash>) INCOMPLETE|ERROR|MISMATCH``) followed by detail lines
indented by two spaces. Blank lines separate blocks but are not relied on
(NCCL omits some of them). Detail lines this parser does not know are counted
in ``unparsed_lines`` rather than failing the report, so that a newer NCCL
adding a line does not blind the exporter; a report without its banner, group
table or ``Warnings`` section (cut short) is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from exporter.ccl import ras_text_lines as tl
from exporter.ccl.ras_model import (
    ANY_COLLECTIVE,
    STATUSES,
    Communicator,
    Group,
    JobSummary,
    MissingRank,
    Process,
    RankRef,
    RasParseError,
    RasReport,
)


@dataclass
class _CommAcc:
    """What the Errors/Warnings blocks said about one communicator, while parsing."""

    hash: int
    group: int
    label: str
    kinds: set[str] = field(default_factory=set)
    incomplete: int = 0
    nocomm: int = 0
    missing: dict[int, MissingRank] = field(default_factory=dict)
    init_errors: int = 0
    async_errors: int = 0
    status_mismatch: bool = False
    op_counts: dict[str, set[int]] = field(default_factory=dict)
    # Which sub-list the next "Rank N -- ..." line belongs to.
    context: str = ""
    status_context: str = ""
    collective: str = ""


class _TextParser:
    """Single pass over the lines; one instance per report."""

    def __init__(self, text: str) -> None:
        self.lines = [line.rstrip("\r") for line in text.split("\n")]
        self.library = ""
        self.version = ""
        self.runtime: int | None = None
        self.driver: int | None = None
        self.summary_rows: dict[str, list[tuple[int, ...]]] = {}
        self.summary_kind = ""
        self.collection: float | None = None
        self.comm_section_seen = False
        self.comm_result_seen = False
        self.groups: list[Group] = []
        self.comms: dict[int, _CommAcc] = {}
        self.missing_processes: list[Process] = []
        self.missing_process_count = 0
        self.dead_processes: list[Process] = []
        self.dead_process_count = 0
        self.timeouts = 0
        self.warnings_seen = False
        self.responding: set[str] = set()
        self.missing_hosts: set[str] = set()
        self.unparsed = 0
        self.block = ""
        self.comm: _CommAcc | None = None

    # -- driver -------------------------------------------------------------------

    def parse(self) -> RasReport:
        index = self._banner()
        section = "preamble"
        while index < len(self.lines):
            line = self.lines[index]
            following = self.lines[index + 1] if index + 1 < len(self.lines) else ""
            underlined = following.startswith("=") and set(following) == {"="}
            stripped = line.strip()
            comms = tl.COMMUNICATORS.match(stripped)
            if stripped == "Job summary" and underlined:
                section, index = "summary", index + 2
                continue
            if comms:
                section = "communicators"
                self.comm_section_seen = True
                if comms.group(1) is not None:
                    self.collection = tl.seconds(comms.group(1))
                index += 2 if underlined else 1
                continue
            if stripped in ("Errors", "Warnings") and underlined:
                section = stripped.lower()
                self.warnings_seen = self.warnings_seen or section == "warnings"
                self.block, self.comm = "", None
                index += 2
                continue
            if stripped:
                self._line(section, line, stripped)
            index += 1
        return self._report()

    def _banner(self) -> int:
        index = 0
        while index < len(self.lines) and not self.lines[index].strip():
            index += 1
        if index >= len(self.lines):
            raise RasParseError("empty report")
        match = tl.BANNER.match(self.lines[index].strip())
        if not match:
            raise RasParseError(
                f"line {index + 1}: expected 'NCCL version ...' or 'RCCL version ...' banner"
            )
        self.library = match.group(1).lower()
        self.version = match.group(2)
        index += 1
        if index < len(self.lines):
            runtime = tl.RUNTIME.match(self.lines[index].strip())
            if runtime:
                self.runtime, self.driver = tl.number(runtime.group(1)), tl.number(runtime.group(2))
                index += 1
        return index

    def _line(self, section: str, line: str, stripped: str) -> None:
        handled = False
        if section == "summary":
            handled = self._summary(stripped)
        elif section == "communicators":
            handled = self._group(stripped)
        elif section in ("errors", "warnings"):
            handled = self._block(section, line, stripped)
        if not handled:
            self.unparsed += 1

    # -- job summary ----------------------------------------------------------------

    def _summary(self, stripped: str) -> bool:
        words = " ".join(stripped.split())
        if words in tl.SUMMARY_KINDS:
            self.summary_kind = tl.SUMMARY_KINDS[words]
            return True
        if words in (
            "Nodes Processes GPUs Processes GPUs",
            "Nodes Processes GPUs",
            "Nodes Processes",
            "Processes GPUs",
        ):
            return True
        if words.startswith("The outlier node"):
            return True
        node = tl.OUTLIER_NODE.match(words)
        if node:
            # The node is a RAS peer, alive or not: it says nothing about reachability.
            return True
        fields = words.split(" ")
        if self.summary_kind and all(f.isdigit() for f in fields):
            if len(fields) != tl.SUMMARY_WIDTHS[self.summary_kind]:
                return False
            self.summary_rows.setdefault(self.summary_kind, []).append(
                tuple(tl.number(f) for f in fields)
            )
            return True
        return False

    def _summary_result(self) -> JobSummary | None:
        for kind, (nodes, processes, gpus) in (("consistent", (0, 3, 4)), ("totals", (0, 1, 2))):
            rows = self.summary_rows.get(kind)
            if rows:
                row = rows[-1]
                return JobSummary(nodes=row[nodes], processes=row[processes], gpus=row[gpus])
        return None

    # -- group table ------------------------------------------------------------------

    def _group(self, stripped: str) -> bool:
        if stripped == "No communicator data collected!":
            self.comm_result_seen = True
            return True
        words = " ".join(stripped.split())
        if words.startswith("Group Comms Nodes Ranks") or words.startswith("# in group"):
            return True
        match = tl.GROUP_ROW.match(words)
        if not match:
            return False
        index, comms, nodes, low, high, per_comm, in_group, status, errors = match.groups()
        status = tl.status_word(status)
        error_set = frozenset(errors.split(","))
        if status not in STATUSES or not error_set <= tl.ERROR_WORDS:
            return False
        self.comm_result_seen = True
        self.groups.append(
            Group(
                index=tl.number(index),
                comms=tl.number(comms),
                nodes_per_comm=tl.number(nodes),
                ranks_per_node_min=tl.number(low),
                ranks_per_node_max=tl.number(high if high is not None else low),
                ranks_per_comm=tl.number(per_comm),
                ranks_in_group=tl.number(in_group),
                status=status,
                errors=error_set - {"OK"},
            )
        )
        return True

    # -- Errors and Warnings blocks ---------------------------------------------------------

    def _block(self, section: str, line: str, stripped: str) -> bool:
        if not line.startswith(" "):
            return self._block_header(section, stripped)
        if self.comm is not None:
            return self._comm_detail(self.comm, stripped)
        if self.block == "INCOMPLETE":
            return self._process_detail(stripped, dead=False)
        if self.block == "DEAD":
            return self._process_detail(stripped, dead=True)
        if self.block == "TIMEOUT":
            match = tl.TIMEOUTS.match(stripped)
            if match:
                self.timeouts += tl.number(match.group(1))
                return True
        return False

    def _block_header(self, section: str, stripped: str) -> bool:
        self.comm = None
        header = tl.COMM_HEADER.match(stripped)
        if header:
            group, member, hash_text, kind = header.groups()
            value = int(hash_text, 16)
            acc = self.comms.get(value)
            if acc is None:
                acc = _CommAcc(value, tl.number(group), f"#{group}-{member}")
                self.comms[value] = acc
            acc.kinds.add(kind)
            acc.context = kind
            acc.status_context = ""
            acc.collective = ""
            self.block = kind
            self.comm = acc
            return True
        if section == "errors" and stripped in ("INCOMPLETE", "DEAD"):
            self.block = stripped
            return True
        if section == "warnings" and stripped == "TIMEOUT":
            self.block = stripped
            return True
        self.block = ""
        return False

    def _process_detail(self, stripped: str, *, dead: bool) -> bool:
        counter = (tl.DEAD_PROCESSES if dead else tl.MISSING_PROCESSES).match(stripped)
        if counter:
            if dead:
                self.dead_process_count += tl.number(counter.group(1))
            else:
                self.missing_process_count += tl.number(counter.group(1))
            return True
        process = tl.PROCESS.match(stripped)
        if process:
            pid, host, gpus = process.groups()
            entry = Process(host, tl.number(pid), gpus)
            (self.dead_processes if dead else self.missing_processes).append(entry)
            self.missing_hosts.add(host)
            return True
        return bool(tl.COULD_NOT_FIND.match(stripped))

    def _comm_detail(self, acc: _CommAcc, stripped: str) -> bool:
        if acc.context == "INCOMPLETE":
            return self._incomplete_detail(acc, stripped)
        if acc.context == "ERROR":
            return self._error_detail(acc, stripped)
        return self._mismatch_detail(acc, stripped)

    def _add_missing(self, acc: _CommAcc, ref: RankRef, *, unresponsive: bool) -> None:
        acc.missing[ref.rank] = MissingRank(ref, unresponsive=unresponsive)
        if ref.host:
            (self.missing_hosts if unresponsive else self.responding).add(ref.host)

    def _missing_list(self, acc: _CommAcc, match: re.Match[str], *, unresponsive: bool) -> None:
        for number in tl.numbers(match.group(1)):
            self._add_missing(acc, RankRef(number), unresponsive=unresponsive)

    def _incomplete_detail(self, acc: _CommAcc, stripped: str) -> bool:
        match = tl.MISSING_RANKS.match(stripped)
        if match:
            acc.incomplete += tl.number(match.group(1))
            return True
        rank = tl.RANK_WHERE.match(stripped)
        if rank:
            self._add_missing(acc, tl.rank_ref(rank, 2), unresponsive=True)
            return True
        listed = tl.MISSING_LIST.match(stripped)
        if listed:
            self._missing_list(acc, listed, unresponsive=True)
            return True
        return False

    def _responding(self, ref: RankRef) -> None:
        if ref.host:
            self.responding.add(ref.host)

    def _answered(
        self, stripped: str, *patterns: tuple[re.Pattern[str], int]
    ) -> re.Match[str] | None:
        """The first of ``patterns`` (each with its "where" group) naming a rank that answered.

        That rank's host is noted as responding.
        """
        for pattern, where in patterns:
            match = pattern.match(stripped)
            if match:
                self._responding(tl.rank_ref(match, where))
                return match
        return None

    def _error_detail(self, acc: _CommAcc, stripped: str) -> bool:
        init = tl.INIT_ERRORS.match(stripped)
        if init:
            acc.init_errors += tl.number(init.group(1))
            return True
        async_ = tl.ASYNC_ERRORS.match(stripped)
        if async_:
            acc.async_errors += tl.number(async_.group(1))
            return True
        if tl.RANKS_REPORTED.match(stripped):
            return True
        return self._answered(stripped, (tl.RANK_REPORTED, 3), (tl.RANK_WHERE, 2)) is not None

    def _mismatch_detail(self, acc: _CommAcc, stripped: str) -> bool:
        if stripped == tl.DIFFERENT_STATUS:
            acc.status_mismatch = True
            acc.collective = ""
            return True
        counts = tl.DIFFERENT_COUNTS.match(stripped)
        if counts:
            name = counts.group(1)
            acc.collective = ANY_COLLECTIVE if name == "collective" else name
            acc.op_counts.setdefault(acc.collective, set())
            return True
        if acc.collective:
            return self._count_detail(acc, acc.collective, stripped)
        return self._status_detail(acc, stripped)

    def _status_detail(self, acc: _CommAcc, stripped: str) -> bool:
        several = tl.RANKS_STATUS.match(stripped)
        if several:
            acc.status_context = tl.status_word(several.group(2))
            if acc.status_context == "NOCOMM":
                acc.nocomm += tl.number(several.group(1))
            return True
        unknown = tl.UNKNOWN_LIST.match(stripped)
        if unknown:
            self._missing_list(acc, unknown, unresponsive=False)
            return True
        # A rank with a status line of its own, or one listed under "N ranks have status S".
        single = tl.RANK_STATUS.match(stripped)
        listed = None if single else tl.RANK_WHERE.match(stripped)
        if single:
            status, ref = tl.status_word(single.group(2)), tl.rank_ref(single, 3)
            acc.status_context = ""
        elif listed:
            status, ref = acc.status_context, tl.rank_ref(listed, 2)
        else:
            return False
        if status != "NOCOMM":
            self._responding(ref)
            return True
        if single:  # a listed rank is in its list's count already
            acc.nocomm += 1
        self._add_missing(acc, ref, unresponsive=False)
        return True

    def _count_detail(self, acc: _CommAcc, collective: str, stripped: str) -> bool:
        values = acc.op_counts.setdefault(collective, set())
        several = tl.RANKS_LAUNCHED.match(stripped)
        if several:
            values.add(tl.number(several.group(2)))
            return True
        if tl.RANKS_NONE.match(stripped):
            values.add(0)
            return True
        rank = self._answered(
            stripped, (tl.RANK_LAUNCHED, 3), (tl.RANK_NONE, 2), (tl.RANK_WHERE, 2)
        )
        if rank is None:
            return False
        if rank.re is tl.RANK_LAUNCHED:
            values.add(tl.number(rank.group(2)))
        elif rank.re is tl.RANK_NONE:
            values.add(0)
        return True

    # -- result ------------------------------------------------------------------------

    def _communicator(self, acc: _CommAcc) -> Communicator:
        group = next((g for g in self.groups if g.index == acc.group), None)
        errors: set[str] = set(group.errors) if group else set()
        errors |= acc.kinds
        return Communicator(
            hash=acc.hash,
            size=group.ranks_per_comm if group else None,
            status=group.status if group else "",
            nodes=group.nodes_per_comm if group else None,
            missing=tuple(acc.missing[r] for r in sorted(acc.missing)),
            missing_count=acc.incomplete + acc.nocomm,
            unresponsive_ranks=acc.incomplete,
            op_range={name: (min(v), max(v)) for name, v in acc.op_counts.items() if v},
            init_error_ranks=acc.init_errors,
            async_error_ranks=acc.async_errors,
            status_mismatch=acc.status_mismatch,
            errors=frozenset(errors),
            label=acc.label,
        )

    def _report(self) -> RasReport:
        if not self.comm_section_seen:
            raise RasParseError("report ends before the 'Communicators...' section")
        if not self.comm_result_seen:
            raise RasParseError("report has no communicator table (cut short?)")
        if not self.warnings_seen:
            raise RasParseError("report ends before its 'Warnings' section (cut short?)")
        return RasReport(
            format="text",
            library=self.library,
            version=self.version,
            runtime_version=self.runtime,
            driver_version=self.driver,
            summary=self._summary_result(),
            communicators_total=sum(g.comms for g in self.groups),
            groups=tuple(self.groups),
            communicators=tuple(self._communicator(acc) for acc in self.comms.values()),
            missing_processes=tuple(self.missing_processes),
            missing_process_count=self.missing_process_count,
            dead_processes=tuple(self.dead_processes),
            dead_process_count=self.dead_process_count,
            timeouts=self.timeouts,
            collection_seconds=self.collection,
            responding_hosts=frozenset(self.responding),
            missing_hosts=frozenset(self.missing_hosts),
            unparsed_lines=self.unparsed,
        )


def parse_text(text: str) -> RasReport:
    """Parse a text report; RasParseError when it is not one or was cut short."""
    try:
        return _TextParser(text).parse()
    except RasParseError:
        raise
    except ValueError as exc:  # e.g. a digit int() does not take ("²" passes isdigit)
        raise RasParseError(f"unparsable number: {exc}") from None
