"""Phase outcomes, the verdict, and the two files: report.json and summary.txt."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compare import Check

# A phase's status. Only "failed" (a check disagreed) makes the exit status nonzero:
# "error" (the phase could not run to the end: a crash, a timeout) and "skipped"
# (what it needs is not here, e.g. no torch) say so in the report without
# pretending anything was compared.
PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"


@dataclass
class Phase:
    """One phase's outcome: its checks, its measured figures, and what went wrong."""

    name: str
    status: str = PASSED
    reason: str = ""
    seconds: float = 0.0
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def check(
        self, name: str, ok: bool, *, seen: Any = None, bound: str = "", uuid: str = ""
    ) -> bool:
        """Record a check with a loose bound (load, NCCL, cost phases); returns ``ok``."""
        self.checks.append(Check(name, uuid, "pass" if ok else "fail", "", [seen], bound, ""))
        return ok

    def skip(self, reason: str) -> None:
        """Mark the whole phase skipped."""
        self.status, self.reason = SKIPPED, reason

    def settle(self) -> None:
        """A phase that ran to its end has failed when any of its checks failed."""
        if self.status == PASSED and any(c.verdict == "fail" for c in self.checks):
            self.status = FAILED

    def as_dict(self) -> dict[str, Any]:
        """For the JSON report."""
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "checks": [c.as_dict() for c in self.checks],
            "figures": self.figures,
        }


# Nothing was validated: no GPU was seen (no nvidia-smi, or it listed none).
NO_GPU = 3


def exit_status(phases: list[Phase], gpus: Sequence[str] | None = None) -> int:
    """1 when any check disagreed; else 3 when no GPU was seen; else 0.

    Errors and skips are reported, not failed. ``gpus``: the GPUs nvidia-smi listed
    (None: not asked). A run that saw none validated nothing, and automation that reads
    only the status must not take it for a pass.
    """
    if any(p.status == FAILED for p in phases):
        return 1
    return NO_GPU if gpus is not None and not gpus else 0


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "/".join(_short(v) for v in value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    return str(value)


def summary(phases: list[Phase], context: dict[str, Any]) -> str:
    """The human summary: one line per phase, then every failed check, then figures."""
    lines = [
        f"gpu-validate {context.get('started', '')}  host {context.get('host', '')}",
        f"GPUs: {', '.join(context.get('gpus', [])) or 'none seen'}",
        "",
    ]
    for p in phases:
        counts = {v: sum(c.verdict == v for c in p.checks) for v in ("pass", "fail", "skip")}
        tally = (
            f"{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip"
            if p.checks
            else ""
        )
        reason = f"  ({p.reason})" if p.reason else ""
        lines.append(f"{p.name:<12} {p.status.upper():<8} {p.seconds:6.1f}s  {tally}{reason}")
    failed = [(p, c) for p in phases for c in p.checks if c.verdict == "fail"]
    if failed:
        lines += ["", "Disagreements:"]
        for p, c in failed:
            where = f" [{c.uuid}]" if c.uuid else ""
            lines.append(
                f"  {p.name}: {c.name}{where}: nvidia-smi {c.smi or '-'}, exporter "
                f"{_short(c.exporter)}; {c.tolerance}; {c.note}".rstrip("; ")
            )
    for p in phases:
        if p.figures:
            lines += ["", f"{p.name} figures:"]
            lines += [f"  {k}: {_short(v)}" for k, v in p.figures.items()]
    lines += ["", f"exit status {exit_status(phases, context.get('gpus', []))}"]
    return "\n".join(lines) + "\n"


def write(out: Path, phases: list[Phase], context: dict[str, Any]) -> tuple[Path, Path]:
    """Write report.json and summary.txt into ``out``; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "context": context,
        "exit_status": exit_status(phases, context.get("gpus", [])),
        "phases": [p.as_dict() for p in phases],
    }
    report = out / "report.json"
    text = out / "summary.txt"
    tmp = out / ".report.json.tmp"
    tmp.write_text(json.dumps(document, indent=2, default=str) + "\n")
    os.replace(tmp, report)
    text.write_text(summary(phases, context))
    return report, text


def context() -> dict[str, Any]:
    """Where and when this ran."""
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "gpus": [],
    }
