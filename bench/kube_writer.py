"""What the Kubernetes health writer costs the API server, and how soon a restart may act.

Usage: ``python bench/kube_writer.py [--restarts 3]`` (prints JSON; run by hand, not in CI).

1. API requests per node-hour (by method): the writer against the fake API server
   (tests/fakes/kube_api.py) with a virtual clock, one reconcile every ``interval``
   (30 s) over one simulated hour, 8 GPUs. ``quiet``: nothing changes (the first
   hour includes the start: the Node read and the adoption list); ``failure``: one
   GPU failed all hour with ``taint_effect: NoExecute`` (the first hour includes
   the rule's creation, the ResourceSlice listing and the effect patch).
2. From a real daemon's spawn to the first reconcile that could delete anything:
   a daemon with the fake NVML (2 GPUs, both ok), a rule its node's writer left for
   GPU 1 on the fake API server, ``clear_after`` short; measured from the process
   spawn to the moment the rule is gone from the fake (polled every 5 ms), and that
   minus ``clear_after``: the time to the first pass with fresh data.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter import log  # noqa: E402
from exporter.outputs.kube_rules import (  # noqa: E402
    Selector,
    Taint,
    create_body,
    our_labels,
    rule_name,
)
from exporter.store import Store  # noqa: E402
from tests.e2e.test_nvml_daemon import OTHERS_OFF  # noqa: E402
from tests.fakes.kube_api import FakeApiServer, node  # noqa: E402
from tests.fakes.nvml.control import FakeNvml, build  # noqa: E402
from tests.helpers.daemon import Daemon  # noqa: E402
from tests.helpers.kube_writer import (  # noqa: E402
    NODE,
    TOKEN,
    Clock,
    nvidia_slices,
    publish,
    verdict,
    writer,
)
from tests.helpers.pki import make_pki  # noqa: E402

GPUS = 8
INTERVAL = 30.0
HOUR = 3600.0


def _uuids(n: int) -> list[str]:
    return [f"GPU-{i:08x}-0000-4000-8000-000000000000" for i in range(n)]


def simulated_hours(pki: Path, work: Path, failed: bool) -> dict[str, Any]:
    """Requests in the first and the second simulated hour, by method."""
    uuids = _uuids(GPUS)
    with FakeApiServer(pki, token=TOKEN) as api:
        api.nodes = {NODE: node(NODE)}
        api.slices = nvidia_slices(uuids)
        store, clock = Store(), Clock()
        w = writer(api, pki, work, store, clock, taint_effect="NoExecute")
        states = ["failed" if failed and i == 1 else "ok" for i in range(GPUS)]
        publish(
            store,
            *(
                verdict(str(i), u, s, *(["xid_79"] if s == "failed" else []), action="none")
                for i, (u, s) in enumerate(zip(uuids, states, strict=True))
            ),
        )
        hours = []
        for _ in range(2):
            mark = len(api.requests)
            end = clock.now + HOUR
            while clock.now < end:
                w.reconcile()
                clock.now += INTERVAL
            made = Counter(r["method"] for r in api.requests[mark:])
            hours.append({"total": sum(made.values()), "by_method": dict(sorted(made.items()))})
        assert w.status()["failures"] == {}, w.status()["failures"]
        return {"first_hour": hours[0], "steady_hour": hours[1], "rules": len(api.rules)}


def restart_to_first_delete(pki: Path, work: Path, lib: Path, clear_after: float) -> float:
    """Seconds from a daemon's spawn until it deleted a rule an ok GPU still carried."""
    fake = FakeNvml.create(lib, work / f"nvml-state-{time.monotonic_ns()}", 2)
    uuids = [fake.uuid(0), fake.uuid(1)]
    token = work / "token"
    token.write_text(TOKEN + "\n")
    with FakeApiServer(pki, token=TOKEN) as api:
        api.nodes = {NODE: node(NODE)}
        api.slices = nvidia_slices(uuids)
        name = rule_name(NODE, uuids[1])
        left = create_body(
            name,
            NODE,
            our_labels(NODE),
            verdict("1", uuids[1], "failed", "xid_79"),
            Taint("accel-exporter.io/unhealthy", "reboot_node", "NoExecute"),
            Selector("gpu.nvidia.com", NODE, "gpu-1"),
        )
        left["metadata"]["uid"] = "uid-left-behind"
        api.rules[name] = left
        config = {
            "sources": {**OTHERS_OFF, "nvml": {"interval": "1s", "slow_interval": "1s"}},
            "workload": {"enabled": False},
            "kubernetes": {
                "api_server": api.url,
                "node_name": NODE,
                "token_file": str(token),
                "ca_file": str(pki / "ca.pem"),
            },
            "outputs": {
                "kubernetes": {
                    "enabled": True,
                    "interval": "1s",
                    "clear_after": f"{clear_after:g}s",
                    "taint_effect": "NoExecute",
                }
            },
        }
        d = Daemon(work, config, env=fake.env())
        spawned = time.monotonic()
        d.start(wait=60)
        try:
            while name in api.rules:
                if time.monotonic() - spawned > 120:
                    raise RuntimeError("the rule was never deleted:\n" + "\n".join(d.lines[-20:]))
                time.sleep(0.005)
            return time.monotonic() - spawned
        finally:
            d.stop()
            fake.close()


def main() -> int:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--clear-after", type=float, default=2.0)
    args = parser.parse_args()
    log.configure("warning")  # the in-process writer's lines on stderr, not in the JSON
    out: dict[str, Any] = {"gpus": GPUS, "interval_s": INTERVAL, "heartbeat_s": 300.0}
    with tempfile.TemporaryDirectory(prefix="bench-kube-writer-") as tmp:
        work = Path(tmp)
        (work / "pki").mkdir()
        pki = make_pki(work / "pki", ("server", "127.0.0.1"))
        out["requests_per_node_hour"] = {
            "quiet": simulated_hours(pki, work, failed=False),
            "failure": simulated_hours(pki, work, failed=True),
        }
        lib = build(work / "nvml")
        seconds = [
            restart_to_first_delete(pki, work, lib, args.clear_after) for _ in range(args.restarts)
        ]
        out["restart_to_first_delete"] = {
            "clear_after_s": args.clear_after,
            "spawn_to_delete_s": [round(s, 3) for s in seconds],
            "spawn_to_delete_median_s": round(statistics.median(seconds), 3),
            "minus_clear_after_median_s": round(statistics.median(seconds) - args.clear_after, 3),
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
