"""Process start to the first full /metrics on one fake 16-GPU node, printed as JSON.

Run by hand:

    .venv/bin/python bench/startup.py [--rounds 7] [--devices 16] [--tree DIR ...]

The measure a user sees: from spawning ``python -m exporter`` (default config, default
profile, the fake NVML of tests/fakes/nvml) to the first ``/metrics`` body that holds
``accel_power_watts`` of every GPU. The client asks every 5 ms from the moment of
spawning (a refused connection is asked again). Per round it also takes the CPU the
daemon and its workers spent until then (``/proc/<pid>/stat``: robust to the load of a
shared machine, unlike wall time), the time of the first HTTP answer of any kind, and
the phases the daemon's own log lines time-stamp (``listening``, the nvml worker ready).

Each ``--tree`` (a checkout; default: this one) runs from a venv of its own under
``DIR/.tools/accel-exporter``, installed the way bench/idle.py installs it (editable,
every runtime extra, no dev extra), so that trees are compared as a node runs them. With
several trees the rounds are interleaved (tree A, tree B, tree A, ...): both meet the
same background load. Result per tree: each round's figures, their p50 and p90.
Target (issue 39): spawn to full body p50 <= 300 ms.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.idle import cpu_seconds, daemon_venv, tree  # noqa: E402
from tests.fakes.nvml.control import FakeNvml, build  # noqa: E402

POWER = "accel_power_watts{"
ASK_EVERY = 0.005
GIVE_UP_SECONDS = 30.0
# Log lines whose time stamps mark a phase: (event, source or "").
PHASES = {"listening_ms": ("listening", ""), "worker_ready_ms": ("worker ready", "nvml")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def full(body: str, uuids: list[str]) -> bool:
    """Whether ``body`` holds a power reading of every GPU in ``uuids``."""
    power = [line for line in body.splitlines() if line.startswith(POWER)]
    return all(any(f'uuid="{u}"' in line for line in power) for u in uuids)


def one_start(
    python: Path,
    fake: FakeNvml,
    uuids: list[str],
    work: Path,
    extra: list[str],
    ask_every: float = ASK_EVERY,
) -> dict[str, Any]:
    """Spawn one daemon, ask until the body is full; its figures (ms, CPU ms)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_EXPORTER_", "PYTHON"))}
    env.update(fake.env())
    log = work / f"daemon-{port}.log"
    with log.open("wb") as err:
        spawned, spawned_wall = time.monotonic(), time.time()
        proc = subprocess.Popen(
            [
                str(python),
                "-m",
                "exporter",
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--log.format",
                "json",
                *extra,
            ],
            env=env,
            cwd=str(work),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        first_answer = None
        try:
            while True:
                now = time.monotonic()
                if now - spawned > GIVE_UP_SECONDS or proc.poll() is not None:
                    raise RuntimeError(f"no full body: {log.read_text()[-2000:]}")
                try:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        body = resp.read().decode()
                except (urllib.error.URLError, ConnectionError, OSError):
                    time.sleep(ask_every)
                    continue
                if first_answer is None:
                    first_answer = now - spawned
                if full(body, uuids):
                    done = time.monotonic() - spawned
                    cpu = sum(map(cpu_seconds, tree(proc.pid)))
                    break
                time.sleep(ask_every)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {
        "full_body_ms": round(1000 * done, 1),
        "first_answer_ms": round(1000 * (first_answer or done), 1),
        "cpu_ms_until_full": round(1000 * cpu, 1),
        **phases(log, spawned_wall),
    }


def phases(log: Path, spawned_wall: float) -> dict[str, float]:
    """When the daemon logged each of PHASES, in ms after the spawn (-1: not logged)."""
    out = dict.fromkeys(PHASES, -1.0)
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        for key, (name, source) in PHASES.items():
            if event.get("event") == name and event.get("source", "") == source:
                stamp = datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
                out[key] = round(1000 * (stamp.timestamp() - spawned_wall), 1)
    return out


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 and p90 of each figure over the rounds."""
    out: dict[str, Any] = {}
    for key in rounds[0]:
        values = sorted(r[key] for r in rounds)
        p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
        out[key] = {"p50": round(statistics.median(values), 1), "p90": p90}
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure every tree, rounds interleaved; print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument(
        "--ask-every", type=float, default=ASK_EVERY, help="seconds between two asks"
    )
    parser.add_argument(
        "--daemon-arg",
        action="append",
        default=[],
        help="an argument for every daemon, e.g. --daemon-arg=--sources.amdsmi.enabled=false",
    )
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    pythons = {t: daemon_venv(t / ".tools" / "accel-exporter", t) for t in trees}
    results: dict[Path, list[dict[str, Any]]] = {t: [] for t in trees}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        fake = FakeNvml.create(build(work / "lib"), work / "nvml-state", args.devices)
        uuids = [fake.uuid(i) for i in range(args.devices)]
        for t in trees:  # one unmeasured start each: page cache and .pyc files warm
            one_start(pythons[t], fake, uuids, work, args.daemon_arg, args.ask_every)
        for _ in range(args.rounds):
            for t in trees:
                results[t].append(
                    one_start(pythons[t], fake, uuids, work, args.daemon_arg, args.ask_every)
                )
            load.append(os.getloadavg()[0])
    doc = {
        "devices": args.devices,
        "rounds": args.rounds,
        "daemon_args": args.daemon_arg,
        "ask_every_seconds": args.ask_every,
        "load_average_1m": [round(x, 2) for x in load],
        "trees": {
            str(t): {
                "commit": subprocess.run(
                    ["git", "-C", str(t), "rev-parse", "--short", "HEAD"],
                    capture_output=True,
                    text=True,
                ).stdout.strip(),
                **summary(results[t]),
                "each": results[t],
            }
            for t in trees
        },
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
