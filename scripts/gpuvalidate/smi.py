"""nvidia-smi as an independent witness: which fields it offers, one CSV query, parsing.

Only ``--help-query-gpu`` and ``--query-gpu=... --format=csv,noheader,nounits``
are ever run: read-only queries (tests/unit/test_gpuvalidate_safety.py keeps it so).
"""

from __future__ import annotations

import csv
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

# A cell nvidia-smi prints instead of a value: "[N/A]", "[Not Supported]",
# "[Unknown Error]", "[Insufficient Permissions]", "[Requested functionality has been
# deprecated]", ... Some releases print a bare "N/A".
_ABSENT = re.compile(r"^\[(?P<why>[^\]]*)\]$|^(?P<bare>N/A)$")
# With ``nounits`` cells are bare numbers; without it a unit follows. Either is read.
_NUMBER = re.compile(r"^(?P<num>[-+]?\d+(?:\.(?P<frac>\d+))?)(?:\s*(?P<unit>[A-Za-z%/]+))?$")
_HELP_NAME = re.compile(r'"([^"]+)"')
_FLAGS = {
    "active": 1.0,
    "not active": 0.0,
    "enabled": 1.0,
    "disabled": 0.0,
    "yes": 1.0,
    "no": 0.0,
    "true": 1.0,
    "false": 0.0,
}


class SmiError(Exception):
    """nvidia-smi could not be run or printed something this kit cannot read."""


@dataclass(frozen=True)
class Cell:
    """One value nvidia-smi printed: the raw text, and why it is absent (None: present)."""

    text: str
    absent: str | None = None

    @property
    def present(self) -> bool:
        """Whether nvidia-smi printed a value (not ``[N/A]`` and the like)."""
        return self.absent is None

    def number(self) -> float:
        """The numeric value (a unit after it is ignored); ValueError when there is none."""
        match = _NUMBER.match(self.text)
        if match is None:
            raise ValueError(f"not a number: {self.text!r}")
        return float(match["num"])

    def resolution(self) -> float:
        """One unit of the last digit printed: ``700.00`` -> 0.01, ``81559`` -> 1."""
        match = _NUMBER.match(self.text)
        if match is None:
            raise ValueError(f"not a number: {self.text!r}")
        frac = match["frac"]
        return 10.0 ** -len(frac) if frac else 1.0

    def flag(self) -> float:
        """``Active``/``Enabled``/``Yes`` (or 1) -> 1, their opposites (or 0) -> 0.

        Anything else is a ValueError.
        """
        if self.text.strip() in ("0", "1"):
            return float(self.text.strip())
        try:
            return _FLAGS[self.text.strip().lower()]
        except KeyError:
            raise ValueError(f"not a flag: {self.text!r}") from None

    def pstate(self) -> float:
        """``P0`` -> 0 ... ``P15`` -> 15; ValueError otherwise."""
        match = re.fullmatch(r"P(\d{1,2})", self.text.strip())
        if match is None:
            raise ValueError(f"not a P-state: {self.text!r}")
        return float(match[1])


def cell(text: str) -> Cell:
    """Classify one CSV cell."""
    text = text.strip()
    match = _ABSENT.match(text)
    if match is not None:
        return Cell(text, absent=match["why"] or match["bare"])
    return Cell(text)


def offered(help_text: str) -> set[str]:
    """Field names ``nvidia-smi --help-query-gpu`` lists.

    Each entry starts its line with the quoted name; aliases follow as ``or "alias"``.
    """
    names: set[str] = set()
    for line in help_text.splitlines():
        if line.startswith('"'):
            names.update(_HELP_NAME.findall(line))
    return names


def parse_csv(text: str, fields: Sequence[str]) -> list[dict[str, Cell]]:
    """Rows of ``--format=csv,noheader,nounits`` output, one dict per GPU.

    A row with another number of cells than fields queried is an error (a name
    with a comma in it would shift every later cell silently otherwise).
    """
    rows: list[dict[str, Cell]] = []
    for number, values in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        if not values or values == [""]:
            continue
        if len(values) != len(fields):
            raise SmiError(
                f"nvidia-smi line {number} has {len(values)} cells for {len(fields)} fields"
            )
        rows.append({name: cell(value) for name, value in zip(fields, values, strict=True)})
    return rows


@dataclass(frozen=True)
class Query:
    """One query's rows and the monotonic time half-way through it."""

    rows: list[dict[str, Cell]]
    at: float
    seconds: float


class Smi:
    """Runs nvidia-smi (``binary``) with a deadline per call."""

    def __init__(self, binary: str = "nvidia-smi", timeout: float = 30.0) -> None:
        self.binary = binary
        self.timeout = timeout

    def _run(self, args: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                [self.binary, *args],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SmiError(f"{self.binary} {' '.join(args)}: {exc}") from None
        if done.returncode != 0:
            message = (done.stdout + done.stderr).strip().splitlines()
            raise SmiError(
                f"{self.binary} {' '.join(args)} exited {done.returncode}: "
                + (message[0] if message else "no output")
            )
        return done.stdout

    def offered(self) -> set[str]:
        """The fields this nvidia-smi can query."""
        return offered(self._run(["--help-query-gpu"]))

    def usable(self, fields: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """The fields this nvidia-smi answers in one query, and why it refused the others.

        Normally that is all of them (they come from its own help); when the query
        as a whole fails, each field is tried alone so one refused field does not
        cost the rest.
        """
        try:
            self.query(fields)
            return list(fields), {}
        except SmiError:
            pass
        ok, refused = [], {}
        for name in fields:
            try:
                self.query([name])
                ok.append(name)
            except SmiError as exc:
                refused[name] = str(exc)
        return ok, refused

    def query(self, fields: Sequence[str]) -> Query:
        """Every GPU's values of ``fields``."""
        started = time.monotonic()
        out = self._run([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        ended = time.monotonic()
        return Query(parse_csv(out, fields), (started + ended) / 2, ended - started)
