"""A device backend for worker tests that can hang, crash, exit, answer garbage or slowly.

Runs inside the worker child. Reads the JSON control file at every request:
``{"devices": n, "mode": "ok" | "hang" | "crash" | "exit" | "garbage" | "wrong_id" | "short" |
"bad_reading" | "ragged" | "unencodable" | "slow" | "fault" | "bootstrap_error" | "bootstrap_unavailable" |
"bootstrap_hang" | "log_debug", "delay": seconds, "value": number, "lost": [index, ...]}``. A
``devices`` count other than the one announced at bootstrap makes polls fail with
``inventory_changed``; the devices ``lost`` names are reported down (``gpu_lost``)
by the worker itself, without readings. ``log_debug`` logs one debug line at bootstrap
(whether the daemon sees it says which level the worker logs at).
"""

from __future__ import annotations

import os
import signal
import struct
import time
from typing import Any

from exporter import log
from exporter.backends.base import BackendError, BackendUnavailable
from exporter.workers import child
from tests.helpers.test_sources import control


class MisbehavingBackend:
    """Two fake devices whose behaviour the test controls."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.control_file = str(config["control"])
        self.devices = int(config.get("devices", 2))

    def bootstrap(self) -> dict[str, Any]:
        mode = control(self.control_file).get("mode")
        if mode == "bootstrap_error":
            raise BackendError("init_failed", "the test asked bootstrap to fail")
        if mode == "bootstrap_unavailable":
            raise BackendUnavailable("library_not_found", "libfake.so.1: cannot open")
        if mode == "log_debug":
            log.get(source="worker").debug("backend debug line", devices=self.devices)
        while control(self.control_file).get("mode") == "bootstrap_hang":
            time.sleep(0.05)
        self.devices = int(control(self.control_file).get("devices", self.devices))
        return {
            "vendor": "test",
            "devices": [
                {"device": str(i), "uuid": f"TEST-{i}", "info": {"model": "Test GPU"}}
                for i in range(self.devices)
            ],
        }

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        ctl = control(self.control_file)
        mode = ctl.get("mode", "ok")
        if mode == "hang":
            while control(self.control_file).get("mode") == "hang":
                time.sleep(0.05)
            ctl = control(self.control_file)
        elif mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif mode == "exit":
            os._exit(3)
        elif mode == "garbage":
            os.write(child.protocol_out, struct.pack(">I", 12) + b"not json at!")
            while True:
                time.sleep(1)
        elif mode == "wrong_id":
            child.write_frame_fd(child.protocol_out, {"type": "result", "id": -1, "result": {}})
            while True:
                time.sleep(1)
        elif mode == "slow":
            time.sleep(float(ctl.get("delay", 0.3)))
        elif mode == "fault":
            raise BackendError("device_busy", "the test asked for a fault")
        if int(ctl.get("devices", self.devices)) != self.devices:
            raise BackendError("inventory_changed", "the test changed the device count")
        lost = set(ctl.get("lost", []))
        devices = [
            {"uuid": f"TEST-{i}", "up": i not in lost, "reason": "gpu_lost" if i in lost else ""}
            for i in range(self.devices)
        ]
        value = float(ctl.get("value", 42.0))
        power: list[Any] = [x for i in range(self.devices) if i not in lost for x in (i, value + i)]
        if mode == "short":
            devices = devices[:-1]
        if mode == "bad_reading":
            power += [0, "NaN"]  # a value that is not a number
        if mode == "ragged":
            power += [1]  # a row cut short
        if mode == "unencodable":  # JSON has no NaN: the reply cannot be framed
            power += [0, float("nan")]
        return {"devices": devices, "readings": {"accel_power_watts": power}, "slow_readings": {}}

    def close(self) -> None:
        pass
