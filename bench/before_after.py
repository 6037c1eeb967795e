"""Before/after cost of a refactor, both sides in one run, printed as JSON. Run by hand:

    .venv/bin/python bench/before_after.py --baseline REV [--rounds 2] [--polls 100]
        [--devices 8] [--idle-window 30] [--skip idle]

The baseline revision is checked out into a temporary git worktree; each bench below
then runs in both trees, alternating (baseline, this tree, baseline, this tree, ...),
so both sides meet the same background load, and the best round of each side is kept
(on a shared machine, the least disturbed round is the closest to the code's own cost):

- ``poll``: ``bench/poll.py --backend all`` (nvml, amdsmi, levelzero, hlml: CPU per poll
  through the backend against the same vendor calls made bare);
- ``tpu_neuron``: ``bench/poll_tpu_neuron.py`` (per-poll CPU of the TPU and Neuron paths);
- ``idle``: ``bench/idle.py`` on the 16-GPU fake (idle CPU and RSS of the daemon, with
  nvitop-exporter beside it as the yardstick); each tree gets its own daemon venv.

Each side's bench is the one in its own tree (the baseline's bench measures the
baseline's code). Output: ``{"baseline": REV, "head": REV, "load_average_1m": [..],
"<bench>": {"before": best, "after": best, "rounds": {...}}}``. Figures to compare:
``cpu_seconds_per_poll`` and ``ratio`` per backend, ``cpu_percent`` and ``main_rss_mib``
of ``ours`` in idle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def run_json(tree: Path, script: str, *args: str) -> dict[str, Any]:
    """Run ``bench/<script>`` of ``tree`` with that tree first on the import path."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / script), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}", "stderr": done.stderr[-2000:]}
    # Some benches log to stdout before their JSON (the TPU fake's start-up lines).
    start = done.stdout.find("\n{")
    text = done.stdout if done.stdout.startswith("{") or start < 0 else done.stdout[start:]
    try:
        result: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError:
        return {"error": "no JSON", "stdout": done.stdout[-2000:]}
    return result


def poll_score(result: dict[str, Any]) -> float:
    """Sum of fast-poll CPU over the backends (lower is better); errors rank last."""
    try:
        return sum(float(b["fast"]["cpu_seconds_per_poll"]) for b in result.values())
    except (KeyError, TypeError, ValueError):
        return float("inf")


def tpu_neuron_score(result: dict[str, Any]) -> float:
    try:
        return sum(float(v["cpu_seconds_per_period"]) for v in result.values())
    except (KeyError, TypeError, ValueError):
        return float("inf")


def idle_score(result: dict[str, Any]) -> float:
    try:
        return float(result["ours"]["cpu_percent"])
    except (KeyError, TypeError, ValueError):
        return float("inf")


def poll_summary(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per backend and side: the lowest and the median of each ratio over the rounds."""
    out: dict[str, Any] = {}
    for side, results in rounds.items():
        for result in results:
            for backend, figures in result.items():
                if not isinstance(figures, dict) or "fast" not in figures:
                    continue
                for poll in ("fast", "slow"):
                    for key in ("ratio", "cycle_ratio", "cpu_seconds_per_poll"):
                        value = figures[poll].get(key)
                        if isinstance(value, (int, float)):
                            out.setdefault(backend, {}).setdefault(f"{poll}_{key}", {}).setdefault(
                                side, []
                            ).append(value)
    for figures in out.values():
        for key, sides in figures.items():
            figures[key] = {
                side: {"min": min(v), "median": statistics.median(v)} for side, v in sides.items()
            }
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every bench on both trees and print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="git revision before the change")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--polls", type=int, default=100)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--idle-window", type=float, default=30.0)
    parser.add_argument(
        "--skip", action="append", default=[], choices=("poll", "tpu_neuron", "idle")
    )
    args = parser.parse_args(argv)
    benches: dict[str, tuple[Callable[[Path, Path], dict[str, Any]], Callable[..., float]]] = {
        "poll": (
            lambda tree, _: run_json(
                tree,
                "poll.py",
                "--backend",
                "all",
                "--devices",
                str(args.devices),
                "--polls",
                str(args.polls),
            ),
            poll_score,
        ),
        "tpu_neuron": (
            lambda tree, _: run_json(tree, "poll_tpu_neuron.py", "--polls", str(3 * args.polls)),
            tpu_neuron_score,
        ),
        "idle": (
            lambda tree, venv: run_json(
                tree,
                "idle.py",
                "--window",
                str(args.idle_window),
                "--daemon-venv",
                str(venv),
                "--peer-venv",
                str(ROOT / ".tools" / "nvitop-exporter"),
            ),
            idle_score,
        ),
    }
    report: dict[str, Any] = {
        "baseline": git("rev-parse", args.baseline),
        "head": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "load_average_1m": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-before-") as tmp:
        before = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(before), report["baseline"])
        sides = {
            "before": (before, Path(tmp) / "venv-before"),
            "after": (ROOT, Path(tmp) / "venv-after"),
        }
        try:
            for name, (bench, score) in benches.items():
                if name in args.skip:
                    continue
                rounds: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
                for _ in range(args.rounds):
                    for side, (tree, venv) in sides.items():
                        report["load_average_1m"].append(round(os.getloadavg()[0], 2))
                        rounds[side].append(bench(tree, venv))
                report[name] = {
                    side: min(results, key=score) for side, results in rounds.items()
                } | {"rounds": rounds}
                if name == "poll":
                    report["poll_summary"] = poll_summary(rounds)
        finally:
            git("worktree", "remove", "--force", str(before))
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
