"""Fuzz every parser of outside input with Hypothesis: 100,000 inputs per target by default.

Usage: ``python bench/fuzz.py [--inputs 100000] [--seed N] [--only ras_text,config] [--jobs 2]``
(prints JSON: per target the seed, the inputs run, how they ended, the seconds).

The targets and their strategies are ``tests/helpers/fuzz.py`` (the CI test
runs the same ones for a few hundred inputs). A target that raises anything
but its own error types stops the run with Hypothesis' shrunk input and the
seed that replays it (``--seed``). Each target runs in its own process.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter import log  # noqa: E402
from tests.helpers.fuzz import run_all, summary, targets  # noqa: E402

NAMES = tuple(targets(REPO))


def one(name: str, inputs: int, seed: int) -> dict[str, Any]:
    # The listener logs what it answers 500 for; keep that off the JSON on stdout.
    log.configure("error", "json", sys.stderr)
    try:
        return summary(run_all(inputs, seed, only=(name,)))[0]
    except BaseException as exc:  # reported, with the seed that replays it
        causes = [f"{type(e).__name__}: {e}" for e in getattr(exc, "exceptions", ())]
        return {
            "target": name,
            "seed": seed,
            "failed": f"{type(exc).__name__}: {exc}"[:2000],
            "causes": [c[:2000] for c in causes],
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated target names")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    names = [n for n in NAMES if not args.only or n in args.only.split(",")]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(one, names, [args.inputs] * len(names), [seed] * len(names)))
    result = {
        "seed": seed,
        "inputs_per_target": args.inputs,
        "total_inputs": sum(r.get("inputs", 0) for r in rows),
        "failures": sum(1 for r in rows if "failed" in r),
        "targets": rows,
    }
    print(json.dumps(result, indent=2))
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
