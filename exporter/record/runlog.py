"""The run log: one JSON object per line, flushed as it is written.

Writing never raises: a full disk or an output directory that went away must
not cost the recorded command its exit status. The first failure is logged
(``record_error``) and kept in :attr:`RunLog.error`; later lines are dropped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from exporter import log


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
        self.error = ""
        self.dropped = 0

    def write(self, kind: str, when: float, /, **fields: Any) -> None:
        """One line: ``{"type": kind, "time": when, ...}``; never raises."""
        if self.error:
            self.dropped += 1
            return
        record = {"type": kind, "time": when, **fields}
        try:
            line = json.dumps(_finite(record), separators=(",", ":"), allow_nan=False)
            self._fh.write(line + "\n")
            self._fh.flush()
        except (OSError, ValueError, TypeError) as exc:
            self.error = f"{self.path}: {exc}"
            self.dropped += 1
            log.get(source="record").error(
                "record_error", what="run log", error=self.error, detail="later lines are dropped"
            )

    def close(self) -> None:
        """Close the file (a failing final flush is already logged or is logged now)."""
        try:
            self._fh.close()
        except OSError as exc:
            if not self.error:
                log.get(source="record").error("record_error", what="run log", error=str(exc))


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write a JSON document atomically (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(_finite(document), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    tmp.replace(path)
