"""Measurements shared by the per-backend modules of bench/poll.py."""

from __future__ import annotations

import statistics
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.helpers.daemon import Daemon, samples, value

ROUNDS = 7
STARTS = 3


def cpu_pair(
    through: Callable[[], Any], bare: Callable[[], Any], polls: int
) -> tuple[float, float]:
    """CPU seconds per call of each, interleaved in rounds; the minimum round of each.

    The machine is shared: interleaving exposes both to the same background load,
    and the minimum is the round least disturbed by it.
    """
    through()  # warm caches (function pointers, imports)
    bare()
    per_round = max(1, polls // ROUNDS)
    best = [float("inf"), float("inf")]
    for _ in range(ROUNDS):
        for i, fn in enumerate((through, bare)):
            started = time.process_time()
            for _ in range(per_round):
                fn()
            best[i] = min(best[i], (time.process_time() - started) / per_round)
    return best[0], best[1]


def compare(
    name: str,
    calls: Callable[[], int],
    through: Callable[[], Any],
    bare: Callable[[], Any],
    polls: int,
) -> dict[str, Any]:
    """Figures of one poll kind: the vendor calls each side makes (they must be the
    same, counted by the fake's ``calls()``), CPU per poll of each, their ratio."""

    def made(fn: Callable[[], Any]) -> int:
        before = calls()
        fn()
        return calls() - before

    through_calls, bare_calls = made(through), made(bare)
    if through_calls != bare_calls:
        raise RuntimeError(f"{name}: backend made {through_calls} calls, bare loop {bare_calls}")
    cpu, bare_cpu = cpu_pair(through, bare, polls)
    reply = through()
    return {
        "library_calls_per_poll": through_calls,
        "cpu_seconds_per_poll": cpu,
        "bare_cpu_seconds_per_poll": bare_cpu,
        "ratio": cpu / bare_cpu,
        "series_per_poll": len(reply["readings"]) + len(reply.get("slow_readings", [])),
    }


def _first_complete(
    workdir: Path, config: Mapping[str, Any], env: Mapping[str, str], ids: Sequence[tuple[str, str]]
) -> float:
    daemon = Daemon(workdir, config, env=env)
    started = time.monotonic()
    daemon.start()
    try:
        while True:
            with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
                parsed = samples(resp.read().decode())
            up = [value(parsed, "accel_device_up", device=d, uuid=u) for d, u in ids]
            if all(v == 1 for v in up):
                return time.monotonic() - started
            if time.monotonic() - started > 60:
                raise RuntimeError("the daemon did not serve complete metrics within 60 s")
            time.sleep(0.01)
    finally:
        daemon.stop()


def first_complete_metrics(
    workdir: Path, config: Mapping[str, Any], env: Mapping[str, str], ids: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """Daemon start to the first /metrics with every (device, uuid) up, over a few starts."""
    runs = [_first_complete(workdir, config, env, ids) for _ in range(STARTS)]
    return {
        "first_complete_metrics_seconds": statistics.median(runs),
        "first_complete_metrics_runs": runs,
        "targets": {"fast_ratio_max": 1.5, "first_complete_metrics_seconds_max": 2.0},
    }
