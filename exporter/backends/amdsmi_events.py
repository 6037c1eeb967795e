"""amdsmi event notifications (VM fault, thermal throttle, GPU reset, ...) read on a thread.

Runs inside the worker process. One ``AmdSmiEventReader`` is registered per
device (that arms the kernel's event file and sets the type mask); the C
``amdsmi_get_gpu_event_notification`` call behind ``read`` waits on all of
them at once, so a single thread reads from the first reader and maps each
event back to its device by handle. Waiting happens here, never in a poll: a
poll only copies the counters (:meth:`EventWatcher.readings`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows, put
from exporter.backends.amdsmi_fields import status_name
from exporter.backends.event_wait import rest_after_empty_wait
from exporter.family_names import (
    ACCEL_DEVICE_EVENT_LAST_TIMESTAMP_SECONDS,
    ACCEL_DEVICE_EVENTS_TOTAL,
)

# Event type value -> label. Keyed by value because amdsmi 7.0's enum makes
# PAGE_FAULT_START an alias of PAGE_FAULT_END (both 8), so names mislead.
EVENT_LABELS = {
    1: "vmfault",
    2: "thermal_throttle",
    3: "gpu_pre_reset",
    4: "gpu_post_reset",
    5: "migrate_start",
    6: "migrate_end",
    8: "page_fault_end",
    9: "queue_eviction",
    10: "queue_restore",
    11: "unmap_from_gpu",
    12: "process_start",
    13: "process_end",
}
WAIT_MS = 500
BATCH = 64
# After a read error the thread waits this long before trying again.
ERROR_PAUSE_SECONDS = 5.0
QUIET = frozenset({"no_data", "timeout", "retry"})


@dataclass(frozen=True)
class Watched:
    """A device whose events are counted."""

    handle: Any
    position: int  # in the inventory
    device: str


class EventWatcher:
    """Counts event notifications per (device, event type) on a daemon thread."""

    def __init__(
        self,
        api: Any,
        devices: Sequence[Watched],
        types: Sequence[str],
        source: str,
        *,
        wait_ms: int = WAIT_MS,
    ) -> None:
        self.api = api
        self.wait_ms = wait_ms
        self.devices = list(devices)
        self.types = [t for t in types if t in EVENT_LABELS.values()]
        self._log = log.get(source=source)
        self._names = api.amdsmi_wrapper.amdsmi_status_t__enumvalues
        self._lock = threading.Lock()
        self._counts: dict[tuple[int, str], int] = {}
        self._last: dict[tuple[int, str], float] = {}
        self._readers: list[Any] = []
        self._by_handle: dict[int | None, Watched] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Register every device; start the thread if at least one accepted."""
        enum = self.api.AmdSmiEvtNotificationType
        wanted = [enum(v) for v, label in EVENT_LABELS.items() if label in self.types]
        if not wanted:
            return
        for dev in self.devices:
            crumb.device(int(dev.device))
            try:
                reader = self.api.AmdSmiEventReader(dev.handle, wanted)
            except self.api.AmdSmiException as exc:
                self._log.warning(
                    "events unavailable for device", device=dev.device, error=str(exc).strip()
                )
                continue
            self._readers.append(reader)
            self._by_handle[dev.handle.value] = dev
        crumb.clear()
        if self._readers:
            self._log.info("events watched", devices=len(self._readers), types=self.types)
            self._thread = threading.Thread(target=self._run, name="amdsmi-events", daemon=True)
            self._thread.start()

    @property
    def registered(self) -> int:
        """How many devices are registered for notifications."""
        return len(self._readers)

    def _run(self) -> None:
        reader = self._readers[0]
        wait_seconds = self.wait_ms / 1000
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                events = reader.read(self.wait_ms, BATCH)
            except self.api.AmdSmiLibraryException as exc:
                status = status_name(self._names, int(exc.get_error_code()))
                if status not in QUIET:
                    self._log.warning("event read failed", status=status)
                    self._stop.wait(ERROR_PAUSE_SECONDS)
                else:
                    rest_after_empty_wait(self._stop, began, wait_seconds)
                continue
            except Exception as exc:  # keep counting after a malformed event
                self._log.warning("event read failed", error=f"{type(exc).__name__}: {exc}")
                self._stop.wait(ERROR_PAUSE_SECONDS)
                continue
            if events:
                self._record(events)
            else:
                rest_after_empty_wait(self._stop, began, wait_seconds)

    def _record(self, events: Sequence[dict[str, Any]]) -> None:
        now = time.time()
        enum = self.api.AmdSmiEvtNotificationType
        with self._lock:
            for ev in events:
                handle = ev.get("processor_handle")
                dev = self._by_handle.get(getattr(handle, "value", None))
                try:
                    label = EVENT_LABELS.get(int(enum[str(ev.get("event"))]))
                except KeyError:
                    label = None
                if dev is None or label is None:
                    continue
                key = (dev.position, label)
                self._counts[key] = self._counts.get(key, 0) + 1
                self._last[key] = now

    def readings(self) -> Rows:
        """Counters and last-seen timestamps, as wire rows."""
        out: Rows = {}
        with self._lock:
            for key, count in self._counts.items():
                put(out, ACCEL_DEVICE_EVENTS_TOTAL, key, count)
                put(out, ACCEL_DEVICE_EVENT_LAST_TIMESTAMP_SECONDS, key, self._last[key])
        return out

    def stop(self) -> None:
        """Stop the thread (it wakes within one wait) and unregister the devices."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_ms / 1000 * 4)
            if self._thread.is_alive():
                # A read hung inside the library: stopping the readers would close
                # the event files under it (rocm_smi fcloses them). Leave them to
                # the process exit, which follows.
                self._log.warning("event reader still blocked; leaving it to process exit")
                return
        for reader in self._readers:
            # The device may be gone; the process exits next anyway.
            with contextlib.suppress(self.api.AmdSmiException):
                reader.stop()
        self._readers = []
