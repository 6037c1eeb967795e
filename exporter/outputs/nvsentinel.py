"""The health verdict as NVSentinel HealthEvents on its platform connector's socket.

Opt-in (``outputs.nvsentinel.enabled``; docs/nvsentinel.md). Every ``interval`` it
reads this node's verdicts from the store (``View.health()``: a device whose source
is down, stale or not polled yet has none, and gets no event) and the devices'
identity (``accel_device_info``: index, vendor, PCI address), asks
:func:`~exporter.outputs.nvsentinel_events.plan` what NVSentinel must be told, and
sends that in one ``HealthEventOccurredV1`` call
(:mod:`exporter.outputs.nvsentinel_wire`) with one deadline. What a call delivered
is remembered; what it did not is planned again from the next pass's verdicts, never
replayed from a stale one.

It runs on its own thread: a socket that is absent, refusing or hung delays nothing
but this output (polls, scrapes and the other outputs never wait on it). After a
failed call the next one waits a backoff (``backoff_min`` doubling to
``backoff_max``, exporter/backoff.py). Calls are counted in
``accel_exporter_nvsentinel_events_total{kind}`` and
``accel_exporter_nvsentinel_failures_total{reason}``, the link in
``accel_exporter_nvsentinel_connected`` and /status; the link's state is logged once
per change. A reload that leaves the config as it was keeps the output; a replaced
one hands its counts, and for the same socket, agent and node what NVSentinel was
told, to the next (:meth:`NvsentinelOutput.adopt`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from exporter import log
from exporter.backoff import delay
from exporter.catalog.vocabulary import NVSENTINEL_EVENT_KINDS, NVSENTINEL_FAILURES
from exporter.config.nvsentinel import NvsentinelOutputConfig
from exporter.enrich.devices import DeviceIndex
from exporter.family_names import (
    ACCEL_DEVICE_INFO,
    ACCEL_EXPORTER_NVSENTINEL_CONNECTED,
    ACCEL_EXPORTER_NVSENTINEL_EVENTS_TOTAL,
    ACCEL_EXPORTER_NVSENTINEL_FAILURES_TOTAL,
)
from exporter.model import Reading
from exporter.outputs.base import ended
from exporter.outputs.nvsentinel_events import Event, Identity, Settings, plan
from exporter.outputs.nvsentinel_wire import Connection, SendError
from exporter.store import Store

EVENTS = ACCEL_EXPORTER_NVSENTINEL_EVENTS_TOTAL
FAILURES = ACCEL_EXPORTER_NVSENTINEL_FAILURES_TOTAL
CONNECTED = ACCEL_EXPORTER_NVSENTINEL_CONNECTED
# stop() waits for the call in flight (its deadline) and this much more.
JOIN_MARGIN_SECONDS = 1.0


def node_name(config: NvsentinelOutputConfig, kube_node: str, env: Mapping[str, str]) -> str:
    """The events' nodeName: the section's, the kubernetes section's, $NODE_NAME, the host's."""
    return config.node_name or kube_node or env.get("NODE_NAME", "") or socket.gethostname()


def identities(readings: list[Reading]) -> dict[str, Identity]:
    """Each device's vendor, index and PCI address, by uuid, from accel_device_info."""
    index = DeviceIndex.from_readings(readings)
    return {d.uuid: Identity(d.vendor, d.device, d.pci_bus_id) for d in index.devices}


def kind(event: Event) -> str:
    """The counter's kind of one event: fatal, non_fatal or healthy."""
    return "healthy" if event.healthy else "fatal" if event.fatal else "non_fatal"


class NvsentinelOutput:
    """The ``outputs.nvsentinel`` sender; see the module docstring."""

    name = "nvsentinel"

    def __init__(
        self,
        config: NvsentinelOutputConfig,
        store: Store,
        *,
        node: str,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.store = store
        self.node = node
        self.wall, self.mono = wall, mono
        self.settings = Settings(config.shadow, dict(config.actions))
        self.connection = Connection(config.socket, config.timeout)
        # What NVSentinel was last told of each device (delivered events only), and when.
        self._sent: dict[str, Event] = {}
        self._sent_at: dict[str, float] = {}
        self._events: Counter[str] = Counter(dict.fromkeys(NVSENTINEL_EVENT_KINDS, 0))
        self._failures: Counter[str] = Counter(dict.fromkeys(NVSENTINEL_FAILURES, 0))
        self._connected: bool | None = None  # None: no call yet
        self._consecutive = 0
        self._next_try = 0.0
        self._last_error = ""
        self._last_reason = ""
        self._last_success: float | None = None
        self._calls = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.get(output="nvsentinel", socket=config.socket, node=node)

    # -- the Output protocol ---------------------------------------------------------

    def fingerprint(self) -> tuple[Any, ...]:
        """What it was built from: a reload building an equal one keeps this one running."""
        return (type(self), self.config, self.node)

    def adopt(self, old: object) -> None:
        """Take over the stopped output's counts, and what NVSentinel was told.

        What it was told only for the same socket, agent and node: a reload then
        sends nothing NVSentinel already knows.
        """
        if not isinstance(old, NvsentinelOutput):
            return
        with old._lock:
            self._events.update(old._events)
            self._failures.update(old._failures)
            self._calls = old._calls
            self._last_error, self._last_success = old._last_error, old._last_success
            self._connected = old._connected
            same = (old.config.socket, old.config.agent, old.node) == (
                self.config.socket,
                self.config.agent,
                self.node,
            )
            if same:
                self._sent, self._sent_at = dict(old._sent), dict(old._sent_at)
        self._publish()

    async def start(self) -> None:
        """Publish the counters and start the sending thread."""
        self._publish()
        self._log.info(
            "nvsentinel output started",
            shadow=self.config.shadow,
            agent=self.config.agent,
            strategy=self.settings.strategy,
        )
        self._thread = threading.Thread(target=self._run, name="nvsentinel", daemon=True)
        self._thread.start()

    def stop_seconds(self, deadline: float) -> float:
        """The longest :meth:`stop` takes: the call in flight, and a margin."""
        return self.config.timeout + JOIN_MARGIN_SECONDS

    async def stop(self, deadline: float) -> None:
        """End the thread and join it; no call starts after this (nothing to flush)."""
        self._stop.set()
        if not await ended(self._thread, self.stop_seconds(deadline)):
            self._log.warning("sender thread did not end", waited=self.stop_seconds(deadline))
        self.connection.close()

    def status(self) -> dict[str, Any]:
        """The link, what each device was last told, and the counts, for /status."""
        with self._lock:
            return {
                "socket": self.config.socket,
                "node": self.node,
                "agent": self.config.agent,
                "shadow": self.config.shadow,
                "processing_strategy": self.settings.strategy,
                "connected": self._connected,
                "consecutive_failures": self._consecutive,
                "retry_in": round(max(self._next_try - self.mono(), 0.0), 3),
                "calls": self._calls,
                "events": dict(self._events),
                "failures": dict(self._failures),
                "last_error": self._last_error,
                "last_success": self._last_success,
                "devices": {
                    uuid: {
                        "healthy": event.healthy,
                        "fatal": event.fatal,
                        "recommended_action": event.action,
                        "error_codes": list(event.error_codes),
                    }
                    for uuid, event in sorted(self._sent.items())
                },
            }

    # -- one pass --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sync()
            wait = self.config.interval
            with self._lock:
                if self._consecutive:
                    wait = min(wait, max(self._next_try - self.mono(), 0.0)) or wait
            self._stop.wait(wait)

    def sync(self) -> None:
        """Send what NVSentinel must be told now, unless backing off; never raises."""
        try:
            self._sync()
        except Exception as exc:  # never into the daemon: counted, logged, tried again
            self._failed(SendError("internal", repr(exc)[:300]))

    def _sync(self) -> None:
        now = self.mono()
        if now < self._next_try:
            return
        view = self.store.view()
        health = dict(view.health())
        idents = identities(view.readings(ACCEL_DEVICE_INFO))
        resend = self.config.resend
        due = frozenset(
            uuid
            for uuid, at in self._sent_at.items()
            if resend > 0 and now - at >= resend and not self._sent[uuid].healthy
        )
        step = plan(health, idents, self._sent, self.settings, due)
        if not step.events or self._stop.is_set():
            return
        with self._lock:
            self._calls += 1
        try:
            self.connection.send(step.events, self.config.agent, self.node, self.wall())
        except SendError as exc:
            self._failed(exc)
            return
        self._delivered(step.events, step.sent)

    def _delivered(self, events: tuple[Event, ...], sent: Mapping[str, Event]) -> None:
        now = self.mono()
        with self._lock:
            was = self._connected
            self._sent = dict(sent)
            for event in events:
                self._sent_at[event.uuid] = now
                self._events[kind(event)] += 1
            self._connected, self._consecutive, self._next_try = True, 0, 0.0
            self._last_success = self.wall()
            self._last_error = self._last_reason = ""
        self._publish()
        if was is not True:
            self._log.info("nvsentinel connected", events=len(events))
        for event in events:
            self._log.info(
                "health event sent",
                uuid=event.uuid,
                healthy=event.healthy,
                fatal=event.fatal,
                recommended_action=event.action,
                error_codes=list(event.error_codes),
                strategy=event.strategy,
            )

    def _failed(self, exc: SendError) -> None:
        with self._lock:
            was, reason_before = self._connected, self._last_reason
            self._failures[exc.reason] += 1
            self._consecutive += 1
            wait = delay(self._consecutive, self.config.backoff_min, self.config.backoff_max)
            self._next_try = self.mono() + wait
            self._connected = False
            self._last_error, self._last_reason = exc.detail, exc.reason
            failures = self._consecutive
        self._publish()
        # Once per change: the link lost (or never made), or failing for a new reason.
        if was is not False or reason_before != exc.reason:
            self._log.warning(
                "nvsentinel lost" if was else "nvsentinel unreachable",
                reason=exc.reason,
                detail=exc.detail,
                retry_in=wait,
                consecutive_failures=failures,
            )

    def _publish(self) -> None:
        """The counters and the link gauge into the store (/metrics, OTLP)."""
        with self._lock:
            readings = [
                Reading(EVENTS, (k,), float(self._events[k])) for k in NVSENTINEL_EVENT_KINDS
            ]
            readings += [
                Reading(FAILURES, (r,), float(self._failures[r])) for r in NVSENTINEL_FAILURES
            ]
            readings.append(Reading(CONNECTED, (), 1.0 if self._connected else 0.0))
        self.store.publish("nvsentinel", readings)


def build(
    config: NvsentinelOutputConfig,
    store: Store,
    kube_node: str,
    env: Mapping[str, str] = os.environ,
) -> NvsentinelOutput:
    """The output of ``config``, its node named as the events say it."""
    return NvsentinelOutput(config, store, node=node_name(config, kube_node, env))
