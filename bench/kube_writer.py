"""What the Kubernetes health writer costs the API server, and how soon a restart may act.

Usage: ``python bench/kube_writer.py [--restarts 3]`` (prints JSON; run by hand, not in CI).

1. API requests per node-hour (by method): the writer against the fake API server
   (tests/fakes/kube_api.py) with a virtual clock, one reconcile every ``interval``
   (30 s) over one simulated hour, 8 GPUs. ``quiet``: nothing changes (the first
   hour includes the start: the Node read and the adoption list); ``failure``: one
   GPU failed all hour with ``taint_effect: NoExecute`` (the first hour includes
   the rule's creation, the ResourceSlice listing and the effect patch);
   ``baseboard``: one GPU asking for its baseboard's replacement (scope
   ``baseboard``, all 8 GPUs: one pool-wide rule); ``hive``: one asking for a reset
   of its XGMI hive (scope ``peer_domain``, 4 of the 8: a rule per device).
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
    Taint,
    create_body,
    our_labels,
    rule_name,
)
from exporter.outputs.kube_scope import Want  # noqa: E402
from exporter.outputs.kube_selector import Selector  # noqa: E402
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


# case -> GPU 1's (reason, action, scope, how many GPUs from the first its scope reaches)
CASES = {
    "quiet": None,
    "failure": ("xid_79", "none", "device", 1),
    "baseboard": ("afid_30", "replace_device", "baseboard", GPUS),
    "hive": ("afid_13", "reset_device", "peer_domain", GPUS // 2),
}


def simulated_hours(pki: Path, work: Path, case: str) -> dict[str, Any]:
    """Requests in the first and the second simulated hour, by method."""
    uuids = _uuids(GPUS)
    bad = CASES[case]
    with FakeApiServer(pki, token=TOKEN) as api:
        api.nodes = {NODE: node(NODE)}
        api.slices = nvidia_slices(uuids)
        store, clock = Store(), Clock()
        w = writer(api, pki, work, store, clock, taint_effect="NoExecute")
        records = [verdict(str(i), u, "ok") for i, u in enumerate(uuids)]
        if bad is not None:
            reason, action, scope, reach = bad
            records[1] = verdict(
                "1",
                uuids[1],
                "failed",
                reason,
                action=action,
                scope=scope,
                scope_uuids=tuple(uuids[:reach]) if reach > 1 else (),
            )
        publish(store, *records)
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
        return {
            "first_hour": hours[0],
            "steady_hour": hours[1],
            "rules": len(api.rules),
            "first_pass_requests": _first_pass(api),
            "passes_per_hour": int(HOUR / INTERVAL),
        }


def _first_pass(api: FakeApiServer) -> dict[str, int]:
    """The requests of the writer's first pass, by method (up to its Node status patch)."""
    made: Counter[str] = Counter()
    for r in api.requests:
        made[r["method"]] += 1
        if r["method"] == "PATCH" and r["path"].endswith("/status"):
            break
    return dict(sorted(made.items()))


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
        want = Want(
            key=uuids[1],
            selector=Selector("gpu.nvidia.com", NODE, "gpu-1"),
            action="reboot_node",
            scope="device",
            culprits=(uuids[1],),
            covers=(uuids[1],),
            reasons=("xid_79",),
        )
        taint = Taint("accel-exporter.io/unhealthy", "reboot_node", "NoExecute")
        left = create_body(name, NODE, our_labels(NODE), want, taint)
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
        out["requests_per_node_hour"] = {case: simulated_hours(pki, work, case) for case in CASES}
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
