"""Measurements shared by the per-backend modules of bench/poll.py."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.config.devices import DeviceSourceConfig
from exporter.sources.device import DeviceSource, parse_inventory
from exporter.workers.child import reply_frame
from exporter.workers.protocol import decode
from tests.helpers.daemon import Daemon, samples, value

ROUNDS = 7
STARTS = 3

Parse = Callable[[bytes, bool], list[Any]]


def cpu_min(fns: Sequence[Callable[[], Any]], polls: int) -> list[float]:
    """CPU seconds per call of each function, interleaved in rounds; the minimum round.

    The machine is shared: interleaving exposes all of them to the same background
    load, and the minimum is the round least disturbed by it.
    """
    for fn in fns:
        fn()  # warm caches (function pointers, imports)
    per_round = max(1, polls // ROUNDS)
    best = [float("inf")] * len(fns)
    for _ in range(ROUNDS):
        for i, fn in enumerate(fns):
            started = time.process_time()
            for _ in range(per_round):
                fn()
            best[i] = min(best[i], (time.process_time() - started) / per_round)
    return best


def reply_parser(inventory: dict[str, Any]) -> Parse:
    """The daemon's side of a poll reply: ``parse(frame, slow)`` decodes the frame and
    checks and converts the reply into readings, as DeviceSource does for each poll.

    It drives DeviceSource's own (private) reply check and composition, so the
    figure is the daemon's real cost, identity readings and health verdicts
    included; no worker is started.
    """
    source = DeviceSource("bench", DeviceSourceConfig(), "unused:Backend")
    source._vendor, source._devices = parse_inventory(inventory)

    def parse(frame: bytes, slow: bool) -> list[Any]:
        states, values = source._check_reply(decode(frame[4:])["result"], slow)
        return source._compose(states, values)

    return parse


def compare(
    name: str,
    calls: Callable[[], int],
    through: Callable[[], Any],
    bare: Callable[[], Any],
    polls: int,
    parse: Parse,
    slow: bool,
) -> dict[str, Any]:
    """Figures of one poll kind.

    The vendor calls each side makes (they must be the same, counted by the
    fake's ``calls()``); CPU per poll of the backend alone, of the bare calls,
    of encoding the reply in the worker, of decoding and parsing it in the
    daemon, and of the whole cycle (the three in a row); the ratios to bare.
    """

    def made(fn: Callable[[], Any]) -> int:
        before = calls()
        fn()
        return calls() - before

    through_calls, bare_calls = made(through), made(bare)
    if through_calls != bare_calls:
        raise RuntimeError(f"{name}: backend made {through_calls} calls, bare loop {bare_calls}")
    reply = through()
    message = {"type": "result", "id": 1, "result": reply}
    frame = reply_frame(message)
    if frame[4:].startswith(b'{"type":"fault"'):
        raise RuntimeError(f"{name}: the reply cannot be encoded")
    readings = parse(frame, slow)

    def cycle() -> Any:
        return parse(reply_frame({"type": "result", "id": 1, "result": through()}), slow)

    cpu, bare_cpu, encode_cpu, parse_cpu, cycle_cpu = cpu_min(
        [through, bare, lambda: reply_frame(message), lambda: parse(frame, slow), cycle], polls
    )
    return {
        "library_calls_per_poll": through_calls,
        "cpu_seconds_per_poll": cpu,
        "bare_cpu_seconds_per_poll": bare_cpu,
        "ratio": cpu / bare_cpu,
        "encode_cpu_seconds_per_poll": encode_cpu,
        "parse_cpu_seconds_per_poll": parse_cpu,
        "cycle_cpu_seconds_per_poll": cycle_cpu,
        "cycle_ratio": cycle_cpu / bare_cpu,
        "reply_bytes": len(frame),
        "readings_per_poll": len(readings),
    }


@dataclass
class Subject:
    """A backend ready to measure: its polls (through the backend, and the same vendor
    calls bare), the fake's call counter, the daemon's parse, and how to start a daemon
    on the same fake."""

    calls: Callable[[], int]
    parse: Parse
    polls: dict[str, tuple[Callable[[], Any], Callable[[], Any]]]  # "fast"/"slow": (through, bare)
    close: Callable[[], None]
    config: dict[str, Any]
    env: dict[str, str]
    ids: list[tuple[str, str]]


def measure(subject: Subject, devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Every figure of bench/poll.py for one backend (see its docstring)."""
    result: dict[str, Any] = {"devices": devices, "polls": polls}
    for name, (through, bare) in subject.polls.items():
        result[name] = compare(
            name, subject.calls, through, bare, polls, subject.parse, name == "slow"
        )
    subject.close()
    result.update(first_complete_metrics(workdir, subject.config, subject.env, subject.ids))
    return result


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
        "targets": {
            "fast_ratio_max": 1.5,
            "fast_cycle_ratio_goal": 1.5,
            "first_complete_metrics_seconds_max": 2.0,
        },
    }


@contextlib.contextmanager
def checked_out(root: Path, refs: Mapping[str, str], work: Path) -> Iterator[dict[str, Path]]:
    """A detached worktree of ``root`` per named ref (``""``: ``root`` itself), removed after."""
    trees = {name: (work / name if ref else root) for name, ref in refs.items()}
    try:
        for name, ref in refs.items():
            if ref:
                subprocess.run(
                    ["git", "-C", str(root), "worktree", "add", "--detach", str(trees[name]), ref],
                    check=True,
                    capture_output=True,
                )
        yield trees
    finally:
        for tree in set(trees.values()) - {root}:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
