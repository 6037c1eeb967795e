"""Phase 7: what the exporter costs on this machine.

CPU per poll (daemon and worker) and per NVML call, memory of the daemon and its
workers, and the time from start to the first complete /metrics.

Bounds are loose (an order of magnitude above the figures in docs/nvidia.md): they
catch a pathology (a poll that burns a core, a leak), not a regression of a few
percent; the figures themselves are in the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .expo import cpu_seconds, family_tree, one, rss_bytes
from .phase_compare import INTERVAL, complete, start_daemon
from .phases import Kit
from .report import Phase

MIB = 1048576.0
WINDOW = 10.0
COST_SCRIPT = Path(__file__).with_name("nvml_cost.py")


def nvml_only(kit: Kit) -> dict[str, Any]:
    """A daemon reading only NVIDIA GPUs (host and job sources off), as the cost baseline."""
    return {
        "sources": {
            "host": {"enabled": False},
            "nvml": {"enabled": True, "interval": f"{INTERVAL:g}s", "events": True},
            "amdsmi": {"enabled": False},
            "ccl_ras": {"enabled": False},
            "ccl_inspector": {"enabled": False},
            "cuda_checkpoint": {"enabled": False},
        },
        "workload": {"enabled": False},
    }


def polls(daemon: Any) -> float:
    """Polls of the nvml source so far (the poll-duration histogram's count)."""
    value = one(
        daemon.scrape().samples, "accel_exporter_source_poll_duration_seconds_count", source="nvml"
    )
    return value or 0.0


def run_phase(kit: Kit, phase: Phase) -> None:
    """Measure; then the loose checks."""
    if kit.daemon is not None and kit.daemon.proc is not None and kit.daemon.proc.poll() is None:
        tree = family_tree(kit.daemon.pid)
        phase.figures["full_daemon_rss_bytes"] = {str(p): rss_bytes(p) for p in tree}
    uuids = kit.gpus()  # asked before the clock starts
    daemon = start_daemon(kit, nvml_only(kit), "cost-daemon")
    kit.children.append((kit.current, daemon.proc))  # type: ignore[arg-type]
    try:
        _, ready = daemon.wait(complete(uuids), timeout=30, every=0.05)
        first = time.monotonic() - daemon.started_at
        phase.figures["first_complete_metrics_seconds"] = round(first, 3)
        phase.check("first complete /metrics", ready and first <= 15, seen=first, bound="<= 15 s")
        tree = family_tree(daemon.pid)
        polls0, cpu0 = polls(daemon), cpu_seconds(tree)
        time.sleep(WINDOW)
        polls1, cpu1 = polls(daemon), cpu_seconds(tree)
        per_poll = (cpu1 - cpu0) / (polls1 - polls0) if polls1 > polls0 else None
        rss = {str(p): rss_bytes(p) for p in tree}
        total = sum(v for v in rss.values() if v)
        phase.figures.update(
            {
                "daemon_and_worker_cpu_seconds_per_poll": per_poll,
                "polls_in_window": polls1 - polls0,
                "rss_bytes": rss,
                "rss_bytes_total": total,
            }
        )
        phase.check(
            "daemon + worker CPU per poll",
            per_poll is not None and per_poll <= 0.1,
            seen=per_poll,
            bound="<= 0.1 s",
        )
        phase.check("daemon + worker RSS", total <= 400 * MIB, seen=total, bound="<= 400 MiB")
    finally:
        daemon.stop()
    done = subprocess.run(
        [kit.python, str(COST_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **kit.env},
        cwd=kit.work,
    )
    if done.returncode != 0:
        raise RuntimeError("nvml_cost.py failed: " + done.stderr.strip()[-300:])
    nvml = json.loads(done.stdout.strip().splitlines()[-1])
    phase.figures["nvml"] = nvml
    median = nvml.get("cpu_seconds_per_call_median")
    phase.check(
        "CPU per NVML call (median)",
        median is not None and median <= 0.001,
        seen=median,
        bound="<= 1 ms",
    )
