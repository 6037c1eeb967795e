"""The users' collectors CSV, read as dcgm-exporter reads its ``-f`` file.

dcgm-exporter (internal/pkg/counters/counter_config.go, ReadCSVFile and
ExtractCounters @4.5.3-4.8.2) reads it with Go's encoding/csv, ``#`` starting a
comment line and blank lines skipped, trims spaces around each cell, wants
exactly three cells (field, Prometheus type, help) and accepts the types gauge,
counter, histogram, summary and label. A ``label`` row adds the field's value as
a label on every series instead of a family. The type is used as written.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from exporter.outputs.compat.dcgm_fields import COUNTERS, LABELS, REGISTRY

TYPES = ("gauge", "counter", "histogram", "summary", "label")


class CsvError(ValueError):
    """A malformed collectors CSV; the message names file and line."""


@dataclass(frozen=True)
class Row:
    """One field row of the file, as written."""

    field: str
    kind: str
    help: str
    line: int


@dataclass(frozen=True)
class Selection:
    """What a collectors CSV selects: the rows we serve, and those we cannot, with why.

    ``fields`` and ``labels`` are what the builder takes: (name, type, help) per
    family in file order, and the label field names.
    """

    fields: tuple[tuple[str, str, str], ...]
    labels: tuple[str, ...]
    unserved: tuple[tuple[str, str], ...]  # (field, reason)
    notes: tuple[tuple[str, str], ...]  # (field, note): a type that contradicts the field


def parse(text: str, path: str) -> list[Row]:
    """The file's rows; CsvError naming ``path:line`` on the first malformed one."""
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    rows: list[Row] = []
    try:
        for record in reader:
            line = reader.line_num
            if not record or record[0].lstrip().startswith("#"):
                continue
            cells = [c.strip(" ") for c in record]
            if len(cells) != 3:
                raise CsvError(
                    f"{path}:{line}: expected 3 fields (field, type, help), got {len(cells)}"
                )
            if cells[1] not in TYPES:
                raise CsvError(
                    f"{path}:{line}: unknown Prometheus type {cells[1]!r}"
                    f" (one of {', '.join(TYPES)})"
                )
            rows.append(Row(cells[0], cells[1], cells[2], line))
    except csv.Error as exc:
        raise CsvError(f"{path}:{reader.line_num}: {exc}") from None
    return rows


def select(rows: list[Row]) -> Selection:
    """The rows we can serve (a field listed twice: the first), and the others with a reason."""
    fields: list[tuple[str, str, str]] = []
    labels: list[str] = []
    unserved: dict[str, str] = {}
    notes: list[tuple[str, str]] = []
    seen: set[str] = set()
    for row in rows:
        if row.field in seen:
            continue
        seen.add(row.field)
        if row.kind == "label":
            if row.field in LABELS:
                labels.append(row.field)
            else:
                unserved[row.field] = "a label field we do not read"
            continue
        if row.field not in REGISTRY:
            unserved[row.field] = (
                "not among our readings" if row.field.startswith("DCGM_FI_") else "not a DCGM field"
            )
            continue
        if row.kind in ("histogram", "summary"):
            unserved[row.field] = f"type {row.kind}: a DCGM field is one value per device"
            continue
        natural = "counter" if row.field in COUNTERS else "gauge"
        if row.kind != natural:
            notes.append(
                (row.field, f"listed as {row.kind}, a {natural} by nature: served as written")
            )
        fields.append((row.field, row.kind, row.help))
    return Selection(tuple(fields), tuple(labels), tuple(unserved.items()), tuple(notes))


def load(path: str) -> Selection:
    """The selection of the file at ``path`` (OSError, CsvError as raised)."""
    with open(path, encoding="utf-8") as fh:
        return select(parse(fh.read(), path))
