"""OTLP push output: exports the store's current view every interval, from its own thread.

The export thread is the only one that touches the SDK exporter. A pass pins one
store view, turns it into an OTLP batch (:mod:`exporter.outputs.otlp_batch`) and
hands it to the SDK's OTLP exporter; nothing is queued, so a collector that is
down, slow or refusing costs one bounded export attempt per interval and no
memory: the next pass sends fresh data instead of a backlog. Polls run on the
event loop and /metrics on the HTTP threads, so neither ever waits for this
thread. Results are counted and logged by
:class:`~exporter.outputs.otlp_account.ExportAccount`.

Shutdown flushes once, and the final flush gets the shutdown budget: an export
in flight (a slow or dead collector would hold it for its whole ``timeout``) is
aborted first - gRPC calls are cancelled, retry waits end - and the last batch
goes out on a thread of its own, through a fresh SDK exporter when the old one
had to be shut down. Whatever still runs at the deadline is aborted too and,
failing that, abandoned on its daemon thread, so the daemon's own shutdown
deadline always holds.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.resources import Resource

from exporter import log
from exporter.config.otlp import OtlpSettings, resolve
from exporter.config.outputs import OtlpOutputConfig
from exporter.errors import ConfigError
from exporter.outputs.compat import Compat
from exporter.outputs.otlp_account import LOG_EVERY_SECONDS, ExportAccount
from exporter.outputs.otlp_batch import BatchBuilder
from exporter.outputs.otlp_resource import resource_attributes
from exporter.outputs.otlp_transport import build_exporter, sdk_log_capture, temporality_of
from exporter.outputs.profile import Profile
from exporter.outputs.stamp import StampFactory
from exporter.store import Store

# After the deadline, how long an aborted export may take to notice before it is abandoned.
ABORT_GRACE_SECONDS = 0.25
# What one failure keeps of the SDK's log lines about it.
MAX_SDK_MESSAGES = 4
MAX_ERROR_CHARS = 1000


class OtlpOutput:
    """The ``otlp`` push output."""

    name = "otlp"

    def __init__(
        self,
        settings: OtlpSettings,
        store: Store,
        resource: dict[str, str],
        warnings: list[str] | None = None,
        exporter_factory: Callable[[OtlpSettings], MetricExporter] = build_exporter,
        log_every: float = LOG_EVERY_SECONDS,
        profile: Profile | None = None,
        compat: Compat | None = None,
        stamp: StampFactory | None = None,
    ) -> None:
        self.settings = settings
        # outputs.prometheus.workload_labels' stamping, as attributes (otlp_batch).
        self.stamp = stamp
        self.profile = profile
        # outputs.prometheus.compat's series, pushed too (exporter.outputs.otlp_compat).
        self.compat = compat
        self.store = store
        self.resource = Resource(resource)
        self.account = ExportAccount(store, settings.endpoint or "", log_every)
        self._exporter_factory = exporter_factory
        self._warnings = list(warnings or ())
        self._log = log.get(output="otlp")
        self._exporter: MetricExporter | None = None
        # The exporter of the final flush when the periodic one had to be aborted.
        self._flush_exporter: MetricExporter | None = None
        self._batches: BatchBuilder | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # The periodic loop has returned / the final flush is over.
        self._loop_done = threading.Event()
        self._done = threading.Event()
        self._abort_lock = threading.Lock()
        self._aborted: set[int] = set()
        # The loop and the final flush may overlap (an aborted HTTP request cannot be
        # interrupted): one batch is built at a time, one result accounted at a time.
        self._collect_lock = threading.Lock()
        self._record_lock = threading.Lock()
        self._exporting = False
        self._state = "created"
        self._temporality = "cumulative"

    @classmethod
    def from_config(
        cls,
        config: OtlpOutputConfig,
        store: Store,
        compat: Compat | None = None,
        stamp: StampFactory | None = None,
    ) -> OtlpOutput:
        """Resolve ``outputs.otlp`` with the process environment (already validated by check)."""
        resolution = resolve(config, os.environ)
        if resolution.settings is None:
            raise ConfigError(
                [f"outputs.otlp.{key}: {message}" for key, message in resolution.problems]
            )
        attributes, warnings = resource_attributes(config.resource_attributes, os.environ)
        return cls(
            resolution.settings,
            store,
            attributes,
            resolution.warnings + warnings,
            profile=Profile.from_config(config, store.catalog),
            compat=compat,
            stamp=stamp,
        )

    # -- lifecycle (event loop) ------------------------------------------------

    async def start(self) -> None:
        """Build the exporter and the batch builder and start the export thread."""
        for warning in self._warnings:
            self._log.warning("otlp environment", problem=warning)
        settings = self.settings
        if settings.sdk_disabled:
            self._state = "disabled"
            self._log.info("otlp push off: OTEL_SDK_DISABLED is true")
            return
        self.account.resume()
        try:
            self._exporter = self._exporter_factory(settings)
            # The exporter read the temporality (configured, or the SDK's variable).
            self._temporality = temporality_of(self._exporter)
            self.account.endpoint = self.endpoint()
            self._batches = BatchBuilder(
                self.resource,
                self._temporality,
                self.store.catalog,
                self.profile,
                self.compat,
                self.stamp,
            )
        except Exception as exc:  # e.g. a certificate file that vanished since the config check
            self._state = "failed"
            self.account.last_error = f"cannot start: {type(exc).__name__}: {exc}"
            self._log.error(
                "otlp push cannot start", endpoint=settings.endpoint, error=self.account.last_error
            )
            return
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._state = "running"
        self._thread.start()
        self._log.info(
            "otlp push started",
            endpoint=self.account.endpoint,
            protocol=settings.protocol,
            interval=settings.interval,
            temporality=self._temporality,
            origins=dict(settings.origins),
        )

    def fingerprint(self) -> object:
        """Unique: a reload always replaces the push, as it always did.

        Its counters live in the store and continue (otlp_account.ExportAccount).
        """
        return self

    def adopt(self, old: object) -> None:
        """Nothing to take over: the store keeps the export counters."""

    def stop_seconds(self, deadline: float) -> float:
        """The flush deadline (an abort's grace after it fits the caller's margin)."""
        return deadline

    async def stop(self, deadline: float) -> None:
        """Flush once within ``deadline`` seconds, then release the exporter."""
        if self._thread is None:
            return
        end = time.monotonic() + deadline
        self._stopping.set()
        if self._exporting:
            # It would keep the budget (a collector that does not answer holds an
            # export for its whole timeout) and leave none for the final flush.
            self._abort(self._exporter)
        if not await self._finished_within(self._loop_done, min(ABORT_GRACE_SECONDS, deadline)):
            self._abort(self._exporter)  # an export had just started
        flush = threading.Thread(target=self._final_flush, args=(end,), name="otlp-flush")
        flush.daemon = True
        flush.start()
        if not await self._finished_within(self._done, end - time.monotonic()):
            self._abort(self._flush_exporter or self._exporter)
            if not await self._finished_within(self._done, ABORT_GRACE_SECONDS):
                self.account.detached.set()
                self._state = "abandoned"
                self._log.warning("otlp final flush abandoned at the deadline", deadline=deadline)
                return
        self._state = "stopped"

    async def _finished_within(self, event: threading.Event, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while not event.is_set() and time.monotonic() < end:
            await asyncio.sleep(0.02)
        return event.is_set()

    def _abort(self, exporter: MetricExporter | None) -> None:
        """Shut an SDK exporter down once: cancels gRPC calls and ends retry waits."""
        with self._abort_lock:
            if exporter is None or id(exporter) in self._aborted:
                return
            self._aborted.add(id(exporter))
        try:
            exporter.shutdown(timeout_millis=100)
        except Exception as exc:
            self._log.debug("otlp exporter shutdown failed", error=repr(exc))

    # -- export thread -----------------------------------------------------------

    def _run(self) -> None:
        interval = self.settings.interval
        try:
            next_at = time.monotonic() + interval
            while not self._stopping.wait(max(0.0, next_at - time.monotonic())):
                assert self._exporter is not None
                self._export_once(self._exporter, self.settings.timeout)
                now = time.monotonic()
                # Start times stay on the interval grid; ticks an export overran are skipped.
                next_at += interval * max(1, math.ceil((now - next_at) / interval))
        finally:
            self._loop_done.set()

    def _final_flush(self, end: float) -> None:
        try:
            exporter = self._exporter
            if id(exporter) in self._aborted:
                try:
                    exporter = self._flush_exporter = self._exporter_factory(self.settings)
                except Exception as exc:
                    self._record(False, f"final flush: cannot build an exporter: {exc!r}", 0.0)
                    return
            assert exporter is not None
            budget = max(0.1, min(self.settings.timeout, end - time.monotonic()))
            self._export_once(exporter, budget)
        finally:
            self._abort(self._exporter)
            self._abort(self._flush_exporter)
            self._done.set()

    def _export_once(self, exporter: MetricExporter, timeout: float) -> None:
        started = time.monotonic()
        self._exporting = True
        messages: list[str] = []

        def note(message: str) -> None:
            # The SDK logs each retry's cause, then a summary; the cause is the useful part.
            if message not in messages and len(messages) < MAX_SDK_MESSAGES:
                messages.append(message)

        capture = sdk_log_capture()
        ident = threading.get_ident()
        capture.listen(ident, note)
        try:
            with self._collect_lock:
                assert self._batches is not None
                batch = self._batches.build(self.store.view())
            result = exporter.export(batch, timeout_millis=timeout * 1000.0)
            ok = result is MetricExportResult.SUCCESS
            reported = " / ".join(messages)[:MAX_ERROR_CHARS]
            error = "" if ok else (reported or "the exporter reported a failure")
        except Exception as exc:  # a bug here must not end the export thread
            ok, error = False, repr(exc)
        finally:
            capture.forget(ident)
            self._exporting = False
        self._record(ok, error, time.monotonic() - started)

    def _record(self, ok: bool, error: str, duration: float) -> None:
        with self._record_lock:
            self.account.record(ok, error, duration)

    # -- /status -------------------------------------------------------------

    def endpoint(self) -> str:
        """Where the pushes go: the SDK exporter's own endpoint once it exists."""
        return str(getattr(self._exporter, "_endpoint", "") or self.settings.endpoint or "")

    def status(self) -> dict[str, Any]:
        """What /status shows (header names only, never their values).

        Endpoint and security are what the SDK's exporter settled on (its own
        fields; "" before it exists); ``origins`` names, per setting, the config
        or the variable it came from.
        """
        settings = self.settings
        endpoint = self.endpoint()
        if settings.protocol == "grpc":
            exporter = self._exporter
            secure = exporter is not None and not getattr(exporter, "_insecure", False)
        else:
            secure = endpoint.startswith("https://")
        return {
            "state": self._state,
            "endpoint": endpoint,
            "protocol": settings.protocol,
            "secure": secure,
            "interval": settings.interval,
            "timeout": settings.timeout,
            "compression": settings.compression,
            "temporality": self._temporality,
            "headers": sorted(settings.headers),
            "origins": dict(settings.origins),
            "exporting": self._exporting,
            "series_tracked": len(self._batches) if self._batches is not None else 0,
            **self.account.status(),
        }
