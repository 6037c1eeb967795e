"""Instructions per fast-poll stage under valgrind, printed as JSON. Run by hand, never by CI:

    .venv/bin/python bench/poll_instructions.py [--backend nvml|amdsmi|levelzero|hlml]
        [--poll fast|slow] [--devices 8] [--polls 40] [--root TREE]

``--root`` measures another checkout (a baseline worktree: its ``exporter`` and its
``bench/_poll_<backend>.py``), so a before/after pair is two runs of this script.

bench/poll.py measures CPU seconds, which wander with the load of a shared machine
(±10-20% on a busy 2-core box). Instruction counts do not: each stage is run in
a child process under ``valgrind --tool=callgrind`` twice, once with no repeats and
once with ``--polls`` repeats, and the difference divided by the repeats is what
one repetition costs. Stages, for one fast poll of every device:

    bare    the vendor calls of the poll made bare in a loop
    poll    the poll through the backend (what the worker does)
    encode  the worker writing the reply as a frame
    parse   the daemon decoding the frame and turning the reply into readings

``cycle`` is poll + encode + parse; the ratios are to bare. Needs valgrind
(Debian package ``valgrind``); each stage takes a few seconds to a minute.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STAGES = ("bare", "poll", "encode", "parse")


def _child(backend: str, devices: int, stage: str, count: int, poll: str, root: Path) -> None:
    """Set the backend up, then run one stage ``count`` times (under valgrind)."""
    sys.path[:0] = [str(root), str(root / "bench")]
    from exporter import log
    from exporter.workers.child import reply_frame

    log.configure("warning", "console", sys.stderr)
    with tempfile.TemporaryDirectory(prefix=f"bench-ir-{backend}-") as tmp:
        subject = importlib.import_module(f"_poll_{backend}").prepare(devices, Path(tmp))
        through, bare = subject.polls[poll]
        message = {"type": "result", "id": 1, "result": through()}
        frame = reply_frame(message)
        run = {
            "bare": bare,
            "poll": through,
            "encode": lambda: reply_frame(message),
            "parse": lambda: subject.parse(frame, False),
        }[stage]
        for _ in range(3):  # warm caches: not counted in either run
            run()
        for _ in range(count):
            run()
        subject.close()


def _instructions(backend: str, devices: int, stage: str, count: int, poll: str, root: Path) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            stage,
            "--backend",
            backend,
            "--devices",
            str(devices),
            "--polls",
            str(count),
            "--poll",
            poll,
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    match = re.search(r"Collected : (\d+)", out.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{out.stderr[-2000:]}")
    return int(match.group(1))


def measure(
    backend: str,
    devices: int,
    polls: int,
    poll: str = "fast",
    root: Path = ROOT,
    stages: tuple[str, ...] = STAGES,
) -> dict[str, Any]:
    """Instructions per repetition of each stage, and the ratios to the bare calls."""
    # Byte-compiled first: a run that compiles a module counts its compilation.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root)], check=False)
    per = {
        stage: (
            _instructions(backend, devices, stage, polls, poll, root)
            - _instructions(backend, devices, stage, 0, poll, root)
        )
        / polls
        for stage in stages
    }
    out: dict[str, Any] = {
        "devices": devices,
        "polls": polls,
        "poll": poll,
        "root": str(root),
        "instructions_per_poll": {k: round(v) for k, v in per.items()},
        "poll_ratio": per["poll"] / per["bare"],
    }
    if "encode" in per and "parse" in per:
        cycle = per["poll"] + per["encode"] + per["parse"]
        out["instructions_per_poll"]["cycle"] = round(cycle)
        out["cycle_ratio"] = cycle / per["bare"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backend", choices=("nvml", "amdsmi", "levelzero", "hlml"), default="nvml"
    )
    parser.add_argument("--poll", choices=("fast", "slow"), default="fast")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument(
        "--stages", default=",".join(STAGES), help="comma-separated; bare and poll at least"
    )
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--child", choices=STAGES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stages = tuple(args.stages.split(","))
    if not {"bare", "poll"} <= set(stages) or not set(stages) <= set(STAGES):
        parser.error(f"--stages: bare and poll, and any of {', '.join(STAGES)}")
    if args.child:
        _child(args.backend, args.devices, args.child, args.polls, args.poll, args.root.resolve())
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is needed (apt-get install valgrind)", file=sys.stderr)
        return 2
    report = {
        args.backend: measure(
            args.backend,
            args.devices,
            args.polls,
            args.poll,
            args.root.resolve(),
            stages,
        )
    }
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
