"""Partitions of one hung GPU, before and after they were isolated as one, printed as JSON.

    .venv/bin/python bench/partition_isolation.py [--baseline 2cd0e2f] [--rounds 1]

The fake amdsmi serves 8 MI300X in CPX (64 partitions); every call on the eight
partitions of GPU 3 hangs from the start. The daemon of this tree and the daemon of
``--baseline`` (a git ref, checked out into a temporary worktree, run with the same
interpreter and the same fake) each start with the amdsmi source alone and its default
deadlines (5 s interval, 30 s bootstrap), and we measure:

- ``listening_seconds``: from the daemon's start to its HTTP listener up (Python start-up
  and imports: what a loaded machine stretches, the same for both);
- ``first_identity_seconds``: from the daemon's start to the first AMD device named on
  /metrics (``accel_device_info``: a partition the hung bootstrap identified before it hung);
- ``first_device_seconds``: from the daemon's start to the first ``accel_device_up`` on
  /metrics (no device state known until then);
- ``all_healthy_fresh_seconds``: from the daemon's start to every one of the 56 healthy
  partitions up with a power value (``null``: not within ``--limit`` seconds);
- ``worker_restarts``: restarts by then (one per isolation round).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import checked_out  # noqa: E402
from bench.isolation import TreeDaemon  # noqa: E402
from tests.fakes.amdsmi import build, expected  # noqa: E402
from tests.fakes.amdsmi.state import NUM_XCP, cpx, create  # noqa: E402
from tests.helpers.daemon import samples, value  # noqa: E402

HUNG_GPU = 3
CONFIG = {
    "sources": {
        **{n: {"enabled": False} for n in ("host", "nvml", "levelzero", "hlml", "tpu")},
        **{n: {"enabled": False} for n in ("neuron", "ccl_ras", "ccl_inspector")},
        "amdsmi": {"enabled": True},
    }
}


def measure(tree: Path, lib_root: Path, work: Path, name: str, limit: float) -> dict[str, Any]:
    fake = create(work / f"state-{name}", devices=64)
    cpx(fake)
    hung = range(HUNG_GPU * NUM_XCP, (HUNG_GPU + 1) * NUM_XCP)
    for i in hung:
        fake.rule("*", hang=True, device=i)
    healthy = [(str(i), expected.uuid(fake.device(i))) for i in range(64) if i not in hung]
    d = TreeDaemon(tree, work, {**build.env_for(lib_root, {}), **fake.env})
    d.config = CONFIG
    began = time.monotonic()
    d.start()
    listening = time.monotonic() - began
    named = first = fresh = None
    try:
        while time.monotonic() - began < limit:
            got = samples(d.metrics())
            if named is None and any(k[0] == "accel_device_info" for k in got):
                named = round(time.monotonic() - began, 2)
            if first is None and any(k[0] == "accel_device_up" for k in got):
                first = round(time.monotonic() - began, 2)
            if all(
                value(got, "accel_device_up", device=k, uuid=u) == 1
                and value(got, "accel_power_watts", device=k, uuid=u) is not None
                for k, u in healthy
            ):
                fresh = round(time.monotonic() - began, 2)
                break
            time.sleep(0.25)
        restarts = d.status()["sources"]["amdsmi"]["worker_restarts"]
    finally:
        fake.clear_rules()
        fake.release_hangs()
        d.stop()
        fake.close()
    return {
        "listening_seconds": round(listening, 2),
        "first_identity_seconds": named,
        "first_device_seconds": first,
        "all_healthy_fresh_seconds": fresh,
        "worker_restarts": restarts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="2cd0e2f", help="git ref of the design before")
    parser.add_argument(
        "--candidate", default="", help="git ref to measure instead of this working tree"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--limit", type=float, default=400.0, help="give up after (seconds)")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"baseline": args.baseline, "candidate": args.candidate or "working tree"}
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        work = Path(tmp)
        refs = {"baseline": args.baseline, "candidate": args.candidate}
        with checked_out(ROOT, refs, work) as trees:
            lib_root = build.build(work / "lib")  # this tree's fake serves both
            runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
            for r in range(args.rounds):
                for name, tree in trees.items():
                    runs[name].append(measure(tree, lib_root, work, f"{name}-{r}", args.limit))
            out.update(runs)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
