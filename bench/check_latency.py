"""Latency of ``accel-exporter check`` against a running daemon, printed as JSON.

Run by hand (no network needed; the fake NVML is compiled with the system's cc):

    .venv/bin/python bench/check_latency.py [--devices 8] [--calls 40] [--baseline REF]

One daemon of this checkout runs on the fake NVML (tests/fakes/nvml) with ``--devices``
GPUs; the Node Problem Detector command, ``check health --exit-codes npd --url URL``
(it reads ``/v1/devices``; ``--check "exporter"`` names another), is spawned
``--calls`` times as a fresh process, the way NPD and Slurm run it. ``--baseline REF``
(a commit, e.g. ``main``) also runs that commit's check from a detached worktree,
alternating call by call with this checkout's, so both meet the same background load;
the daemon is this checkout's for both (the check is the client, the daemon only
answers one request).

Each call runs from a checkout the way a node's install does: without ``rich``, which the
dev extra brings in and which structlog imports whenever it is installed
(tests/helpers/without_rich hides it; ``--with-rich`` keeps it), and with its bytecode
compiled (``__pycache__`` is written by a warm-up call, whatever PYTHONDONTWRITEBYTECODE says).

Per checkout: ``wall_ms`` (spawn to exit, p50/p90/max), ``cpu_ms`` (user + system CPU
of the process, from ``os.wait4``, p50/p90/max), and the status line of the last call.
Target (issue 39): p50 wall and CPU <= 150 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import checked_out  # noqa: E402
from tests.fakes.nvml.control import FakeNvml, build  # noqa: E402
from tests.helpers.cli import WITHOUT_RICH  # noqa: E402
from tests.helpers.daemon import Daemon  # noqa: E402

NPD = "health --exit-codes npd"


def one_call(
    checkout: Path, url: str, with_rich: bool, check: str = NPD
) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, exit status, stdout) of one check process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_EXPORTER_")}
    # An installed package has its bytecode compiled (pip does it): the warm-up call
    # writes it here, where a sandbox's PYTHONDONTWRITEBYTECODE would recompile every module.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(checkout)] + ([] if with_rich else [str(WITHOUT_RICH)])
    )
    argv = [sys.executable, "-m", "exporter", "check", *check.split()]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*argv, "--url", url], env=env, cwd=str(checkout), stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    proc.stdout.close()
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, out.strip()


def summary(values: list[float]) -> dict[str, float]:
    """p50, p90 and max of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "p50": round(statistics.median(ordered) * 1000, 1),
        "p90": round(p90 * 1000, 1),
        "max": round(ordered[-1] * 1000, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--baseline", default="", help="a commit whose check runs beside")
    parser.add_argument("--with-rich", action="store_true", help="let structlog import rich")
    parser.add_argument("--check", default=NPD, help=f"the check and its options (default {NPD!r})")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"devices": args.devices, "calls": args.calls, "check": args.check}
    with tempfile.TemporaryDirectory(prefix="check-latency-") as tmp:
        work = Path(tmp)
        fake = FakeNvml.create(build(work / "lib"), work / "state", args.devices)
        refs = {"this": "", **({"baseline": args.baseline} if args.baseline else {})}
        with (
            checked_out(ROOT, refs, work) as trees,
            Daemon(work, {"sources": {"host": {"interval": "1s"}}}, env=fake.env()) as daemon,
        ):
            daemon.wait_for(
                lambda: len(json.loads(daemon.get("/v1/devices").text)["devices"]) == args.devices,
                what="every GPU's verdict",
                timeout=60,
            )
            runs: dict[str, list[tuple[float, float, int, str]]] = {name: [] for name in trees}
            for tree in trees.values():
                # Warm the page cache, and write the bytecode an install would have.
                one_call(tree, daemon.url, args.with_rich, args.check)
            for _ in range(args.calls):  # alternated, so every checkout meets the same load
                for name, tree in trees.items():
                    runs[name].append(one_call(tree, daemon.url, args.with_rich, args.check))
        fake.close()
    for name, got in runs.items():
        result[name] = {
            "ref": refs[name] or "working tree",
            "wall_ms": summary([g[0] for g in got]),
            "cpu_ms": summary([g[1] for g in got]),
            "exit_codes": sorted({g[2] for g in got}),
            "last": got[-1][3],
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
