"""NVML events (XID and friends) read on a background thread inside the worker.

The thread blocks in ``nvmlEventSetWait`` with a short timeout and only ever
touches its own counters under a lock that polls hold just long enough to copy
them, so waiting for events never delays a poll. Counts are per (device, XID)
with the wall time of the last one, forwarded as counters and timestamps.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows, put
from exporter.backends import nvml_support as nv
from exporter.backends.event_wait import rest_after_empty_wait
from exporter.family_names import (
    ACCEL_DEVICE_EVENT_LAST_TIMESTAMP_SECONDS,
    ACCEL_DEVICE_EVENTS_TOTAL,
    ACCEL_XID_ERRORS_TOTAL,
    ACCEL_XID_LAST_TIMESTAMP_SECONDS,
)

WAIT_MS = 500
# After an error other than TIMEOUT, wait this long before trying again (no spin).
ERROR_PAUSE_SECONDS = 1.0


@dataclass
class Tally:
    """How many events of one kind a device produced, and when the last one came."""

    count: int = 0
    last: float = 0.0


def handle_address(handle: Any) -> int:
    """A stable key for an nvmlDevice_t (the pointer value)."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class EventWatcher:
    """Registers for events on every GPU and tallies them on a daemon thread."""

    def __init__(
        self,
        nvml: Any,
        devices: Sequence[tuple[int, Any]],
        *,
        wait_ms: int = WAIT_MS,
        clock: Callable[[], float] = time.time,
        indices: Sequence[int] | None = None,
    ) -> None:
        self.nvml = nvml
        self.wait_ms = wait_ms
        self.clock = clock
        # (inventory position, handle) of each GPU; events name the handle.
        self._positions = {handle_address(h): position for position, h in devices}
        self._devices = list(devices)
        # The library index of each, for the breadcrumb (positions differ when some are isolated).
        self._indices = list(indices) if indices is not None else [p for p, _ in devices]
        self._lock = threading.Lock()
        self._xid: dict[tuple[int, str], Tally] = {}
        self._events: dict[tuple[int, str], Tally] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        self._log = log.get(source="nvml")
        self._wait_failures: set[int] = set()
        self.registered = 0  # GPUs registered for events

    def start(self) -> bool:
        """Create the event set, register each GPU, start the thread; False if impossible."""
        n = self.nvml
        try:
            self._set = n.nvmlEventSetCreate()
        except n.NVMLError as exc:
            self._log.warning("events unavailable", reason=nv.reason_of(int(exc.value)))
            return False
        for (device, handle), index in zip(self._devices, self._indices, strict=True):
            crumb.device(index)
            try:
                mask = self._mask(handle)
                if mask:
                    n.nvmlDeviceRegisterEvents(handle, mask, self._set)
                    self.registered += 1
            except n.NVMLError as exc:
                # One GPU without events (e.g. lost) must not cost the others theirs.
                self._log.warning(
                    "event registration failed", device=device, reason=nv.reason_of(int(exc.value))
                )
        crumb.clear()
        self._log.info("events watched", devices=self.registered, of=len(self._devices))
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()
        return True

    def _mask(self, handle: Any) -> int:
        """The event types to register for one GPU.

        Those wanted and supported; XID alone when the GPU will not say what it
        supports (XIDs matter most, and registering them is still worth a try).
        """
        n = self.nvml
        try:
            return int(n.nvmlDeviceGetSupportedEventTypes(handle)) & nv.EVENT_MASK
        except n.NVMLError as exc:
            if int(exc.value) in nv.DEVICE_FATAL:
                raise
            return nv.EVENT_XID

    def _run(self) -> None:
        n = self.nvml
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                data = n.nvmlEventSetWait(self._set, self.wait_ms)
            except n.NVMLError as exc:
                code = int(exc.value)
                if code != nv.TIMEOUT:
                    if code not in self._wait_failures:  # once per reason, not per wait
                        self._wait_failures.add(code)
                        self._log.warning("event wait failed", reason=nv.reason_of(code))
                    self._stop.wait(ERROR_PAUSE_SECONDS)
                else:
                    rest_after_empty_wait(self._stop, began, self.wait_ms / 1000)
                continue
            self._record(data)

    def _record(self, data: Any) -> None:
        position = self._positions.get(handle_address(data.device))
        if position is None:
            return
        kind = int(data.eventType)
        if kind == nv.EVENT_XID:
            key, table = (position, str(int(data.eventData))), self._xid
        else:
            name = dict(nv.EVENTS).get(kind)
            if name is None:
                return
            key, table = (position, name), self._events
        now = self.clock()
        with self._lock:
            tally = table.setdefault(key, Tally())
            tally.count += 1
            tally.last = now

    def readings(self) -> Rows:
        """Counters and last-seen timestamps, as wire rows."""
        with self._lock:
            xid = [(k, Tally(t.count, t.last)) for k, t in self._xid.items()]
            events = [(k, Tally(t.count, t.last)) for k, t in self._events.items()]
        out: Rows = {}
        for (count, last), tallies in (
            ((ACCEL_XID_ERRORS_TOTAL, ACCEL_XID_LAST_TIMESTAMP_SECONDS), xid),
            ((ACCEL_DEVICE_EVENTS_TOTAL, ACCEL_DEVICE_EVENT_LAST_TIMESTAMP_SECONDS), events),
        ):
            for key, tally in sorted(tallies, key=lambda item: item[0]):
                put(out, count, key, tally.count)
                put(out, last, key, tally.last)
        return out

    def stop(self) -> None:
        """Stop the thread (it notices within one wait) and free the set."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=self.wait_ms / 1000 * 2 + 1)
            if thread.is_alive():
                return  # a wait hung inside the driver: leave the set to process exit
        if self._set is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlEventSetFree(self._set)
            self._set = None
