"""Sources and a worker backend that misbehave on command, for daemon tests.

Behaviour is read from a JSON control file named by ``ACCEL_TEST_CONTROL`` at
every poll, so a test changes it while the daemon runs:
``{"mode": "ok" | "hang" | "block" | "raise" | "error", "value": 1.0}``.
``hang`` awaits forever (cancellable); ``block`` blocks a thread until the
mode changes (not cancellable, as a stuck /proc read or driver call would).
``ACCEL_TEST_STARTS``, where set, names a file the controlled source appends a line
to each time it is started.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.config.devices import DeviceSourceConfig
from exporter.config.root import Config
from exporter.config.source import SourceConfig
from exporter.errors import SourceError
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source
from exporter.sources.device import DeviceSource


def control(path: str | None = None) -> dict[str, Any]:
    file = path or os.environ.get("ACCEL_TEST_CONTROL", "")
    try:
        return dict(json.loads(Path(file).read_text()))
    except (OSError, ValueError):
        return {"mode": "ok"}


def control_writer(path: Path, **initial: Any) -> Any:
    """``set_mode(mode, **extra)`` writing the control file atomically, started as "ok".

    ``set_mode.path`` is the file, for the config of the source or backend it drives.
    """

    def set_mode(mode: str, **extra: Any) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"mode": mode, **extra}))
        tmp.replace(path)  # a reader never sees half a file

    set_mode("ok", **initial)
    set_mode.path = str(path)  # type: ignore[attr-defined]
    return set_mode


class ControlledSource(Source):
    """Exports ``accel_devices{vendor=<source name>}`` = the control value."""

    def __init__(self, name: str, config: SourceConfig, control_file: str) -> None:
        super().__init__(name, config)
        self.control_file = control_file
        self._call = BlockingCall(name)

    async def start(self) -> None:
        # A slow start widens the window in which start-up races can happen.
        await asyncio.sleep(float(os.environ.get("ACCEL_TEST_START_DELAY", "0")))
        starts = os.environ.get("ACCEL_TEST_STARTS")
        if starts:
            # One line per start: a test counts the starts instead of timing the polls.
            with open(starts, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")

    def _blocking_read(self) -> dict[str, Any]:
        while control(self.control_file).get("mode") == "block":
            time.sleep(0.05)
        return control(self.control_file)

    async def poll(self) -> Sequence[Reading]:
        ctl = control(self.control_file)
        mode = ctl.get("mode", "ok")
        if mode == "hang":
            while control(self.control_file).get("mode") == "hang":
                await asyncio.sleep(0.05)
        elif mode == "block":
            ctl = await self._call(self._blocking_read)
        elif mode == "raise":
            raise RuntimeError("test source exploded")
        elif mode == "error":
            raise SourceError("test_error", "the test asked for an error")
        return [Reading("accel_devices", (self.name,), float(ctl.get("value", 1.0)))]


def build(config: Config) -> list[Source]:
    """``--extra-sources tests.helpers.test_sources:build``: one controlled source."""
    interval = float(os.environ.get("ACCEL_TEST_INTERVAL", "0.5"))
    cfg = SourceConfig(
        enabled=True,
        interval=interval,
        timeout=float(os.environ.get("ACCEL_TEST_TIMEOUT", "5.0")),
        stale_after=float(os.environ.get("ACCEL_TEST_STALE", str(3 * interval))),
    )
    return [ControlledSource("test", cfg, os.environ["ACCEL_TEST_CONTROL"])]


def build_worker(config: Config) -> list[Source]:
    """``--extra-sources tests.helpers.test_sources:build_worker``: a device source on the test backend."""
    cfg = DeviceSourceConfig(
        enabled="auto" if os.environ.get("ACCEL_TEST_AUTO") else True,
        interval=float(os.environ.get("ACCEL_TEST_INTERVAL", "0.5")),
        timeout=float(os.environ.get("ACCEL_TEST_TIMEOUT", "1.0")),
        slow_interval=5.0,
        bootstrap_timeout=10.0,
    )
    return [
        DeviceSource(
            "testdev",
            cfg,
            "tests.helpers.worker_backend:MisbehavingBackend",
            backend_config={"control": os.environ["ACCEL_TEST_CONTROL"], "devices": 2},
        )
    ]
