"""The run log: one JSON object per line, flushed as it is written."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class RunLog:
    """Appends records to ``run.jsonl``; a crash leaves every line written so far readable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] = open(path, "x", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def write(self, kind: str, when: float, /, **fields: Any) -> None:
        """One line: ``{"type": kind, "time": when, ...}``."""
        record = {"type": kind, "time": when, **fields}
        self._fh.write(json.dumps(_finite(record), separators=(",", ":"), allow_nan=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write a JSON document atomically (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(_finite(document), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    tmp.replace(path)
