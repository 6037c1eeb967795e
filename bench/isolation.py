"""Device isolation, side by side with the design before it, printed as JSON. Run by hand:

    .venv/bin/python bench/isolation.py [--baseline 9262012] [--devices 8 16] [--window 15]

For each GPU count, the daemon of this tree and the daemon of ``--baseline`` (a git ref,
checked out into a temporary worktree and run with the same interpreter) each serve the
fake NVML (nvml source only, 1 s interval, 5 s slow interval, no scrapes while measuring):

- ``cpu_ms_per_poll``: CPU of the daemon and its worker over ``--window`` seconds of
  normal polling, divided by the polls made (the normal case; target <= 1.10x baseline);
- ``pss_mib``: proportional set size of the daemon plus its worker (``smaps_rollup``);
- ``hang_to_fresh_seconds``: ``nvmlDeviceGetPowerUsage`` on GPU 1 starts hanging and every
  GPU gets a new power value; seconds until every other GPU shows its new value on
  /metrics (``null``: not within 30 s: the design before this one reports them all down).

Rounds alternate between the two daemons so both meet the same background load.
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
from tests.fakes.nvml.control import FakeNvml, build  # noqa: E402
from tests.helpers.daemon import Daemon, samples, value  # noqa: E402

CONFIG = {
    "sources": {
        **{n: {"enabled": False} for n in ("host", "amdsmi", "ccl_ras", "ccl_inspector")},
        "nvml": {"interval": "1s", "slow_interval": "5s", "timeout": "2s"},
    }
}
HANG_LIMIT = 30.0


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` in ns resolution (schedstat; stat counts 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def polls(d: Daemon) -> int:
    return int(d.status()["sources"]["nvml"]["polls"])


class TreeDaemon(Daemon):
    """The daemon of one source tree: its own code in the daemon and (by cwd) in the worker."""

    def __init__(self, tree: Path, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(workdir, CONFIG, env={**env, "PYTHONPATH": str(tree)})
        self.tree = tree

    def command(self) -> list[str]:
        self.config_file.write_text(json.dumps(self.config))
        # The worker is started as ``python -m exporter.workers`` from the daemon's cwd.
        code = (
            f"import os, sys; os.chdir({str(self.tree)!r}); sys.path.insert(0, {str(self.tree)!r});"
            " from exporter.cli import main; sys.exit(main(sys.argv[1:]))"
        )
        return [sys.executable, "-c", code, "--config.file", str(self.config_file),
                "--web.listen-address", self.listen, "--log.format", "json"]  # fmt: skip


def measure(
    tree: Path, fake: FakeNvml, devices: int, window: float, workdir: Path
) -> dict[str, Any]:
    d = TreeDaemon(tree, workdir, fake.env())
    d.start()
    try:
        uuids = [fake.uuid(i) for i in range(devices)]
        d.wait_metric("accel_device_up", 1, device=str(devices - 1), uuid=uuids[-1])
        time.sleep(2)  # past the first slow poll
        pids = [d.pid, *d.workers()]
        cpu0, polls0 = sum(map(cpu_seconds, pids)), polls(d)
        time.sleep(window)
        cpu1, polls1 = sum(map(cpu_seconds, pids)), polls(d)
        result: dict[str, Any] = {
            "cpu_ms_per_poll": round(1000 * (cpu1 - cpu0) / max(1, polls1 - polls0), 3),
            "polls": polls1 - polls0,
            "pss_mib": round(sum(map(pss_kib, pids)) / 1024, 1),
            # Which design answered (a check that the tree's own code is running).
            "isolates": "isolated_devices" in d.status()["sources"]["nvml"],
        }
        for i in range(devices):
            fake.device(i).power_mw = 100_000
        rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=1, hang=True)
        began = time.monotonic()
        for i in range(devices):
            fake.device(i).power_mw = 150_000
        others = [(str(i), uuids[i]) for i in range(devices) if i != 1]
        fresh_after = None
        while time.monotonic() - began < HANG_LIMIT:
            got = samples(d.metrics())
            if all(value(got, "accel_power_watts", device=k, uuid=u) == 150.0 for k, u in others):
                fresh_after = round(time.monotonic() - began, 2)
                break
            time.sleep(0.05)
        result["hang_to_fresh_seconds"] = fresh_after
        fake.release(rule)
        return result
    finally:
        d.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="9262012", help="git ref of the design to compare")
    parser.add_argument(
        "--candidate", default="", help="git ref to measure instead of this working tree"
    )
    parser.add_argument("--devices", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {
        "baseline": args.baseline,
        "candidate": args.candidate or "working tree",
        "window_seconds": args.window,
    }
    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as tmp:
        work = Path(tmp)
        refs = {"baseline": args.baseline, "isolation": args.candidate}
        with checked_out(ROOT, refs, work) as trees:
            lib = build(work / "lib")
            for devices in args.devices:
                runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "isolation": []}
                for r in range(args.rounds):
                    for name, tree in trees.items():
                        state = work / f"state-{devices}-{name}-{r}"
                        fake = FakeNvml.create(lib, state, devices=devices)
                        runs[name].append(measure(tree, fake, devices, args.window, work))
                best = {
                    name: {
                        "cpu_ms_per_poll": min(x["cpu_ms_per_poll"] for x in rs),
                        "pss_mib": min(x["pss_mib"] for x in rs),
                        "hang_to_fresh_seconds": [x["hang_to_fresh_seconds"] for x in rs],
                        "runs": rs,
                    }
                    for name, rs in runs.items()
                }
                best["cpu_ratio"] = round(
                    best["isolation"]["cpu_ms_per_poll"] / best["baseline"]["cpu_ms_per_poll"], 3
                )
                out[f"{devices}_gpus"] = best
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
