"""One poll over a backend's devices: crumbs, the reply's device list, rows of devices down.

The levelzero and hlml backends share this loop: before touching a device the
worker says which one it is (:mod:`exporter.workers.crumb`), a device found
down has none of its rows in the reply, and a change of state is logged once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from exporter.backend_api import crumb
from exporter.backends.wire import Rows, drop, new_rows


class Polled(Protocol):
    """What the loop needs of a device."""

    index: int  # the library's index (the one crumbs and isolation use)
    device: str
    uuid: str
    down: str  # the reason it was down at the previous poll ("" when up)


D = TypeVar("D", bound=Polled)
# read(device, position, fast rows, slow rows or None) -> the reason it is down, or "".
Read = Callable[[D, int, Rows, "Rows | None"], str]


def poll_devices(devices: Sequence[D], slow: bool, read: Read[D], logger: Any) -> dict[str, Any]:
    """The poll reply of ``devices`` (see exporter.sources.device for its shape)."""
    states = []
    readings, slow_readings = new_rows(), new_rows()
    for position, dev in enumerate(devices):
        crumb.device(dev.index)
        reason = read(dev, position, readings, slow_readings if slow else None)
        states.append({"uuid": dev.uuid, "up": not reason, "reason": reason})
        if reason != dev.down:
            if reason:
                logger.warning("device down", device=dev.device, reason=reason)
            else:
                logger.info("device up", device=dev.device)
            dev.down = reason
        if reason:  # a device found down shows no readings, not half of them
            drop(readings, position)
            drop(slow_readings, position)
    crumb.clear()
    reply: dict[str, Any] = {"devices": states, "readings": readings}
    if slow:
        reply["slow_readings"] = slow_readings
    return reply
