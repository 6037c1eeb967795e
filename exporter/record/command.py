"""``accel-exporter record [--out DIR] [--interval 1s] -- CMD ...``.

``--out`` defaults to a new ``record-<UTC time>`` directory in the working directory
(named on stderr). The recorder's own log lines on stderr are its warnings and errors
only, so the command's stderr stays the command's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter import log
from exporter.config import Config
from exporter.config.durations import parse_duration
from exporter.config.fields import MIN_INTERVAL
from exporter.config.source import SourceConfig
from exporter.record import HELP
from exporter.record.runner import RUN_LOG, Recorder, RecordOptions, StartError
from exporter.sources.base import Source
from exporter.sources.device import DeviceSource
from exporter.sources.registry import build_sources

EXIT_USAGE = 2
# The log levels record keeps; a lower one (info, debug) is raised to warning.
QUIET_LEVELS = ("warning", "error")


def default_out(now: float | None = None) -> str:
    """``record-20261207T123456Z``: a new directory in the working directory."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"record-{stamp}"


def _duration(text: str) -> float:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(f"must be at least {int(MIN_INTERVAL * 1000)}ms")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out``, ``--interval``, ``--ready-timeout`` and the command after ``--``."""
    parser.add_argument(
        "--out",
        default="",
        help="directory for run.jsonl and summary.json (default: ./record-<UTC time>)",
    )
    parser.add_argument(
        "--interval", type=_duration, default=1.0, help="sampling interval (default 1s)"
    )
    parser.add_argument(
        "--ready-timeout",
        type=_duration,
        default=30.0,
        help="longest wait for the device workers before the command starts (default 30s)",
    )
    parser.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command to run"
    )


def _sampled(config: Config, interval: float) -> list[Source]:
    """The host and device sources, with deadlines that fit the sampling interval."""
    out = []
    for source in build_sources(config):
        if source.name != "host" and not isinstance(source, DeviceSource):
            continue
        base = source.config
        if isinstance(base, SourceConfig) and base.timeout is None:
            # The daemon's default deadline is the poll interval (5 s for devices);
            # keep that rather than the shorter sampling interval.
            source.config = dataclasses.replace(base, timeout=base.poll_timeout)
        out.append(source)
    return out


def run(args: argparse.Namespace, load_config: Callable[[], Any]) -> int:
    """Run the command under recording; the command's exit status."""
    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("accel-exporter record: give the command after --", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out or default_out())
    if not args.out:
        print(f"accel-exporter record: writing the run to {out}", file=sys.stderr)
    if (out / RUN_LOG).exists():
        print(
            f"accel-exporter record: {out} already holds a run; choose another --out",
            file=sys.stderr,
        )
        return EXIT_USAGE
    problem = _unwritable(out)
    if problem:
        print(f"accel-exporter record: cannot write to --out {out}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    config = load_config()
    # The command's own stderr is the user's: only the recorder's warnings and errors
    # join it (its workers take the level configured last), never its info lines.
    level = config.log.level if config.log.level in QUIET_LEVELS else "warning"
    log.configure(level, config.log.format)
    options = RecordOptions(out, command, args.interval, args.ready_timeout)
    recorder = Recorder(options, _sampled(config, args.interval))
    try:
        return asyncio.run(recorder.run())
    except StartError as exc:
        print(f"accel-exporter record: {exc}", file=sys.stderr)
        return exc.status


def _unwritable(out: Path) -> str:
    """Why the run cannot be written under ``out`` ("" when it can), before anything starts."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


COMMAND = (HELP, add_arguments, run)
