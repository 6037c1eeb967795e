"""The lines of the text RAS report: their patterns, and the checked conversions of what they match.

:mod:`exporter.ccl.ras_text` walks a report with these; they are kept apart so
that the parser reads as the report's structure, and the table of line shapes
(one per NCCL wording, 2.24 to 2.27) can be read on its own.
"""

from __future__ import annotations

import math
import re

from exporter.ccl.ras_model import RankRef, RasParseError, checked_int

BANNER = re.compile(r"^(NCCL|RCCL) version (\S+)(?: compiled with .*)?$")
RUNTIME = re.compile(r"^(?:CUDA|HIP) runtime version (-?\d+), (?:amdgpu )?driver version (-?\d+)$")
COMMUNICATORS = re.compile(r"^Communicators\.\.\.(?: \((\d+(?:\.\d+)?)s\))?$")
GROUP_ROW = re.compile(
    r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+)(?:-(\d+))?\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z]+(?:,[A-Z]+)*)$"
)
COMM_HEADER = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]{1,16})\) (INCOMPLETE|ERROR|MISMATCH)$")
OUTLIER_NODE = re.compile(r"^Node (\S+) running process(?:es)? ([\d,]+)$")
PROCESS = re.compile(r"^Process (\d+) on node (\S+) managing GPUs? (.+)$")
WHERE = re.compile(r"^GPU (\d+)(?: \(NVML (\d+)\))? managed by process (\d+) on node (\S+)$")
NOT_FOUND = "[process information not found]"
COULD_NOT_FIND = re.compile(r"^\[could not find information on \d+ process(?:es)?\]$")

MISSING_PROCESSES = re.compile(r"^Missing communicator data from (\d+) job process(?:es)?$")
DEAD_PROCESSES = re.compile(r"^(\d+) job process(?:es are| is) considered dead\b.*$")
TIMEOUTS = re.compile(
    r"^Encountered (\d+) communication timeouts? while gathering communicator data$"
)
MISSING_RANKS = re.compile(r"^Missing communicator data from (\d+) ranks?$")
MISSING_LIST = re.compile(r"^The missing ranks?: ([\d,]+)$")
RANK_WHERE = re.compile(r"^Rank (\d+) -- (.+)$")
INIT_ERRORS = re.compile(r"^Initialization errors? on (\d+) ranks?$")
ASYNC_ERRORS = re.compile(r"^Asynchronous errors? on (\d+) ranks?$")
RANKS_REPORTED = re.compile(r"^(\d+) ranks reported (.+)$")
RANK_REPORTED = re.compile(r"^Rank (\d+) reported (.+?)(?: -- (.+))?$")
DIFFERENT_STATUS = "Communicator ranks have different status"
RANKS_STATUS = re.compile(r"^(\d+) ranks have status (\w+)$")
RANK_STATUS = re.compile(r"^Rank (\d+) has status (\w+)(?: -- (.+))?$")
UNKNOWN_LIST = re.compile(r"^The unknown ranks: ([\d,]+)$")
DIFFERENT_COUNTS = re.compile(r"^Communicator ranks have different (\w+) operation counts$")
RANKS_LAUNCHED = re.compile(r"^(\d+) ranks have launched up to operation (\d+)$")
RANKS_NONE = re.compile(r"^(\d+) ranks have not launched any operations$")
RANK_LAUNCHED = re.compile(r"^Rank (\d+) has launched up to operation (\d+)(?: -- (.+))?$")
RANK_NONE = re.compile(r"^Rank (\d+) has not launched any operations(?: -- (.+))?$")

SUMMARY_KINDS = {
    "(total) per node per process (total) (total)": "consistent",
    "(total) (total) (total)": "totals",
    "per node per process": "nodes_processes_gpus",
    "per node": "nodes_processes",
    "per process": "processes_gpus",
}
SUMMARY_WIDTHS = {
    "consistent": 5,
    "totals": 3,
    "nodes_processes_gpus": 3,
    "nodes_processes": 2,
    "processes_gpus": 2,
}
ERROR_WORDS = frozenset({"OK", "MISMATCH", "ERROR", "INCOMPLETE"})
# 2**64 has 20 digits; a sign makes 20 characters for -2**63.
MAX_DIGITS = 20


def status_word(word: str) -> str:
    """A rank status word as 2.26+ spells it."""
    # 2.24/2.25 said UNKNOWN for what 2.26+ calls NOCOMM.
    return "NOCOMM" if word == "UNKNOWN" else word


def number(text: str) -> int:
    """A number the regexes matched (digits, maybe a sign) within what NCCL's printf prints."""
    # Checked before converting: int() of thousands of digits is slow, or refused.
    if len(text) > MAX_DIGITS:
        raise RasParseError(f"number with {len(text)} digits out of the 64-bit range")
    return checked_int(int(text), "number")


def seconds(text: str) -> float:
    """A collection time in seconds; RasParseError when it is not a finite number."""
    value = float(text)
    if not math.isfinite(value):
        raise RasParseError(f"collection time {text[:24]!r} is not a number")
    return value


def numbers(text: str) -> list[int]:
    """A comma-separated list of numbers (``1,5,9``), each checked as :func:`number`."""
    return [number(part) for part in text.split(",") if part]


def rank_at(rank: int, text: str | None) -> RankRef:
    """``rank``, placed by a ``GPU <i> (NVML <j>) managed by process <pid> on node <h>`` text."""
    if text:
        match = WHERE.match(text)
        if match:
            cuda, nvml, pid, host = match.groups()
            return RankRef(rank, host, number(pid), number(cuda), number(nvml if nvml else cuda))
    return RankRef(rank)


def rank_ref(match: re.Match[str], where: int) -> RankRef:
    """The rank a detail line names (its group 1), placed by its group ``where`` if given."""
    return rank_at(number(match.group(1)), match.group(where))
