"""``accel-exporter health clear DEVICE``: an operator's clear of what the judge remembers.

After a repair the judge cannot see (a GPU swapped, a cable reseated, a problem
understood), the operator clears the device's findings: its events (XIDs, AFIDs),
its ECC growth hold, its wait for a reset. Link and ECC baselines stay.

DEVICE is a uuid, or ``SOURCE:DEVICE`` with the device label ``/v1/devices`` and the
metrics show (``nvml:3``). The device is looked up in ``health.state_dir``'s memory
files; one no file knows is refused, and nothing changes. Then:

- a daemon holds the file's lock: a request is left for it (see
  :mod:`exporter.health_state.requests`), the daemon clears the device at that
  source's next poll and answers; the command waits for the answer (three poll
  intervals of the source, at most 30 s, or ``--wait``) and prints it;
- no daemon holds it: the command clears the file itself, under the lock.

Exit status: 0 cleared (or nothing was remembered), 1 unknown device, no answer or
a file that cannot be written, 2 configuration wrong (no ``health.state_dir``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter import state_file
from exporter.commands.config_file import add_config_file_flag
from exporter.health import HealthJudge
from exporter.health_state import HELP, memory, requests
from exporter.health_state.requests import ClearResult
from exporter.state_file import StateFileError

EXIT_CLEARED, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
# The longest wait for a daemon's answer, and the shortest (a source polled every 100 ms).
MAX_WAIT_S = 30.0
MIN_WAIT_S = 2.0
PROG = "accel-exporter health clear"


@dataclass(frozen=True)
class Known:
    """A device some memory file holds: its source, uuid, device label and file."""

    source: str
    uuid: str
    device: str
    path: Path

    @property
    def name(self) -> str:
        """``source:device uuid``, as the command prints it."""
        return f"{self.source}:{self.device} {self.uuid}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``clear`` action and its DEVICE, ``--wait`` and ``--config.file``."""
    sub = parser.add_subparsers(dest="health_command", metavar="ACTION", required=True)
    what = "clear a device's remembered findings (events, ECC growth, wait for a reset)"
    clear = sub.add_parser("clear", help=what, description=what, allow_abbrev=False)
    clear.add_argument("device", help="a device uuid, or SOURCE:DEVICE (nvml:3)")
    clear.add_argument(
        "--wait",
        type=float,
        default=None,
        help="longest wait for a running daemon's answer, seconds "
        f"(default: three poll intervals of the source, at most {MAX_WAIT_S:g})",
    )
    add_config_file_flag(clear, "the daemon's config (health.state_dir)")
    clear.set_defaults(usage_parser=clear)


def memories(state_dir: Path) -> tuple[list[Known], list[str]]:
    """Every device the memory files in ``state_dir`` hold, and the files that could not be read."""
    known: list[Known] = []
    problems: list[str] = []
    for path in sorted(state_dir.glob("health-*.json")):
        found = state_file.read_json(path)
        if found.data is None:
            problems.append(f"{path}: {found.reason}: {found.detail}")
            continue
        try:
            kept, _ = memory.decode(found.data)
        except ValueError as exc:
            problems.append(f"{path}: corrupt: {exc}")
            continue
        known.extend(Known(kept.source, u, d.device, path) for u, d in kept.devices.items())
    return known, problems


def resolve(device: str, known: list[Known]) -> Known | None:
    """The device ``device`` names: a uuid (any case), or ``source:device label``."""
    for item in known:
        if item.uuid.lower() == device.lower():
            return item
    source, sep, label = device.partition(":")
    if sep:
        for item in known:
            if item.source == source and item.device == label:
                return item
    return None


def _wait_for(config: Any, source: str) -> float:
    """Three poll intervals of ``source``, within [MIN_WAIT_S, MAX_WAIT_S]."""
    interval = getattr(getattr(config.sources, source, None), "interval", 5.0)
    return min(MAX_WAIT_S, max(MIN_WAIT_S, 3.0 * float(interval)))


def _said(target: Known, done: ClearResult) -> str:
    what = ", ".join(done.cleared) if done.cleared else "nothing was remembered"
    return f"{target.name}: cleared {what} (asked by {done.by})"


def clear_in_file(target: Known, config: Any, boot: str | None = None) -> list[str]:
    """Clear ``target`` in its file, the caller holding the lock; what was cleared.

    The file goes through the daemon's own judge (recall, clear, remembered), so
    the clear means here what it means in a daemon. OSError or ValueError as raised.
    """
    found = state_file.read_json(target.path)
    if found.data is None:
        raise ValueError(f"{found.reason}: {found.detail}")
    kept, _ = memory.decode(found.data)
    boot = state_file.boot_id() if boot is None else boot
    judge = HealthJudge.configured(config.health, target.source)
    rebooted = bool(kept.boot_id) and bool(boot) and kept.boot_id != boot
    judge.recall(kept.devices, rebooted=rebooted)
    ident = judge.known().get(target.uuid)
    if ident is None:  # the file changed since it was looked up
        raise ValueError(f"{target.path} no longer holds {target.uuid}")
    cleared = judge.clear(ident, by=requests.who(os.getuid()))
    text = memory.encode(memory.Memory(kept.source, boot, judge.remembered()))
    state_file.write_atomic(target.path, text)
    return cleared


def _ask_daemon(target: Known, holder: str, wait: float) -> int:
    """Leave a request for the daemon that holds the file; print its answer."""
    state_dir = target.path.parent
    try:
        token = requests.ask(state_dir, target.source, target.uuid)
    except OSError as exc:
        print(f"{PROG}: cannot leave a request in {state_dir}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    done = requests.result(state_dir, target.source, token, wait)
    if done is None:
        if requests.withdraw(state_dir, target.source, token):
            print(
                f"{PROG}: {target.name}: the daemon ({holder}) did not take the request "
                f"within {wait:g}s (is its {target.source} source polling?); nothing changed",
                file=sys.stderr,
            )
            return EXIT_FAILED
        done = requests.result(state_dir, target.source, token, wait)  # taken: answering
        if done is None:
            print(
                f"{PROG}: {target.name}: the daemon ({holder}) took the request but gave no "
                f"answer within {wait:g}s more; see its log ('findings cleared')",
                file=sys.stderr,
            )
            return EXIT_FAILED
    if done.status != requests.CLEARED:
        print(f"{PROG}: {target.name}: {done.status}: {done.detail}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{_said(target, done)}; done by the daemon (pid {done.pid}), {done.persisted}")
    return EXIT_CLEARED


def run(args: argparse.Namespace, load_config: Callable[[], Any]) -> int:
    """Clear the named device's findings; the exit status (see the module docstring)."""
    config = load_config()
    state_dir = config.health.state_dir
    if not state_dir:
        print(
            f"{PROG}: health.state_dir is not set: the daemon keeps its memory in process "
            "only, and a clear needs the directory it shares with the daemon",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    known, problems = memories(Path(state_dir))
    for problem in problems:
        print(f"{PROG}: warning: {problem}", file=sys.stderr)
    target = resolve(args.device, known)
    if target is None:
        names = "; ".join(item.name for item in known) or "none"
        print(
            f"{PROG}: unknown device {args.device!r}: no memory file in {state_dir} holds it "
            f"(known: {names}); nothing changed",
            file=sys.stderr,
        )
        return EXIT_FAILED
    lock_path = target.path.with_name(target.path.name + state_file.LOCK_SUFFIX)
    try:
        fd = state_file.try_lock(lock_path)
    except StateFileError as exc:
        if exc.reason == "locked":
            holder = exc.detail.removeprefix("locked by ")
            wait = args.wait if args.wait is not None else _wait_for(config, target.source)
            return _ask_daemon(target, holder, wait)
        print(f"{PROG}: cannot lock {lock_path}: {exc}; nothing changed", file=sys.stderr)
        return EXIT_FAILED
    try:
        cleared = clear_in_file(target, config)
    except (OSError, ValueError) as exc:
        print(f"{PROG}: {target.name}: not cleared: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        state_file.unlock(fd)
    done = ClearResult(requests.CLEARED, cleared=cleared, by=requests.who(os.getuid()))
    print(f"{_said(target, done)}; no daemon holds {target.path}: cleared in the file")
    return EXIT_CLEARED


COMMAND = (HELP, add_arguments, run)
