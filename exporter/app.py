"""Composition root: builds the store, sources, scheduler and outputs, and runs them.

Lifecycle: SIGTERM/SIGINT stop in order (stop scheduling and cancel polls, stop
workers, stop HTTP, flush push outputs) well within 5 s. SIGHUP reloads the
config; an invalid new config is logged reason by reason and the old one keeps
running, and so does a new config that would change an exported label set
(``workload.k8s.pod_labels``), which needs a restart. A SIGHUP during a reload
schedules one more after it (a burst gives at least one reload of the last
file); a source the new config leaves as it was keeps running untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from exporter import __version__, log
from exporter.config import Config, load_config
from exporter.config.addresses import join_host_port, parse_listen_address
from exporter.documents import devices_document, source_state, with_rfc3339
from exporter.errors import ConfigError
from exporter.outputs import prometheus_setup
from exporter.outputs.base import Output
from exporter.outputs.http import Endpoints, HttpServer, ListenError
from exporter.outputs.http_conns import HttpCounters
from exporter.outputs.registry import build_outputs
from exporter.scheduler import Scheduler
from exporter.sources import cper_ledger
from exporter.sources.base import Source
from exporter.sources.registry import build_sources, catalog_for
from exporter.store import Store
from exporter.workers import prestart

SHUTDOWN_BUDGET_SECONDS = 4.0
OUTPUT_FLUSH_SECONDS = 1.5

SourceBuilder = Callable[[Config], Sequence[Source]]


@dataclass
class Runtime:
    """The parts rebuilt on a reload: sources, their scheduler, push outputs."""

    config: Config
    sources: list[Source]
    scheduler: Scheduler
    outputs: list[Output] = field(default_factory=list)


class _Rebuilt(Protocol):
    """What a reload may keep: a named part whose fingerprint says how it was built."""

    @property
    def name(self) -> str: ...

    def fingerprint(self) -> object: ...


_P = TypeVar("_P", bound=_Rebuilt)


def _kept(running: Iterable[_P], built: Iterable[_P]) -> list[_P]:
    """``built``, with each part that ``running`` has under its name, built the same, kept."""
    current = {part.name: part for part in running}
    return [
        current[part.name]
        if part.name in current and current[part.name].fingerprint() == part.fingerprint()
        else part
        for part in built
    ]


class StartupError(Exception):
    """The daemon cannot start (listener, certificates); the message is one line.

    ``status`` is the exit status: 2 for configuration problems, 1 otherwise.
    """

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class App:
    """The running daemon."""

    def __init__(
        self,
        config: Config,
        *,
        config_path: str | None = None,
        overrides: Mapping[str, str] | None = None,
        source_builder: SourceBuilder = build_sources,
    ) -> None:
        self.config = config
        # The daemon keeps the CPER state file; one-shot commands only read it.
        cper_ledger.enable_writes()
        self.config_path = config_path
        self.overrides = dict(overrides or {})
        self.source_builder = source_builder
        # Rows with configured labels (pod label keys) are fixed for the daemon's life.
        self.store = Store(catalog=catalog_for(config))
        self.exposition = prometheus_setup.exposition_for(self.store, config)
        self.runtime: Runtime | None = None
        self.http: HttpServer | None = None
        # Kept across reloads, so a new listener continues the counters.
        self.http_counters = HttpCounters()
        self.started_at = time.time()
        self._stop = asyncio.Event()
        # One lifecycle change at a time: start, reload and shutdown never overlap.
        self._lifecycle = asyncio.Lock()
        self._reload_task: asyncio.Task[None] | None = None
        # A SIGHUP came during a reload: reload once more when it ends.
        self._reload_again = False
        self._retiring: list[Runtime] = []
        self._log = log.get()

    # -- state for the HTTP handlers (called on HTTP threads; read-only) ---

    def ready(self) -> tuple[bool, list[str]]:
        """Ready once every enabled source finished its first poll, however it ended."""
        pending = [r.name for r in self.store.records() if not r.answered]
        return not pending and self.runtime is not None, pending

    def status(self) -> dict[str, Any]:
        """The /status document."""
        runtime = self.runtime
        now = time.monotonic()
        sources: dict[str, Any] = {}
        by_name = {s.name: s for s in runtime.sources} if runtime else {}
        schedules = runtime.scheduler.schedules if runtime else {}
        for record in self.store.records():
            snap = record.snapshot
            sched = schedules.get(record.name)
            state, reason = source_state(record, now)
            entry: dict[str, Any] = {
                "state": state,
                "reason": reason,
                "last_error": (
                    record.unavailable_detail
                    if record.unavailable is not None
                    else (sched.last_detail if sched and sched.last_reason else "")
                ),
                "last_success": record.last_success,
                "last_duration": snap.duration if snap else None,
                "next_poll": sched.next_poll if sched else None,
                "polling": sched.polling if sched else False,
                "consecutive_failures": sched.consecutive_failures if sched else 0,
                "interval": by_name[record.name].interval() if record.name in by_name else None,
                "polls": record.polls,
                "errors": dict(record.errors),
                "worker_restarts": record.restarts,
                "series": len(snap.readings) if snap else 0,
            }
            source = by_name.get(record.name)
            if source is not None:
                try:
                    entry.update(source.status())
                except Exception as exc:
                    entry["status_error"] = repr(exc)
            sources[record.name] = entry
        outputs = {}
        for output in runtime.outputs if runtime else []:
            try:
                outputs[output.name] = output.status()
            except Exception as exc:
                outputs[output.name] = {"status_error": repr(exc)}
        ready, pending = self.ready()
        return with_rfc3339(
            {
                "version": __version__,
                "pid": os.getpid(),
                "started_at": self.started_at,
                "ready": ready,
                "pending": pending,
                "listen": self.http.url if self.http else None,
                "connections": self.http.connections.counts() if self.http else None,
                "sources": sources,
                # The sources whose devices are simulated (accel-exporter --demo).
                "simulated": sorted(n for n, e in sources.items() if e.get("simulated")),
                "outputs": outputs,
            }
        )

    def devices(self) -> dict[str, Any]:
        """The /v1/devices document: every device source's devices and their health."""
        runtime = self.runtime
        sources = runtime.sources if runtime else []
        return devices_document(self.store, sources, os.environ.get("NODE_NAME") or None)

    # -- lifecycle -----------------------------------------------------------

    def _endpoints(self) -> Endpoints:
        return Endpoints(
            self.exposition,
            self.ready,
            self.status,
            self.http_counters,
            lambda readings: self.store.publish("http", readings),
            self.devices,
        )

    def _make_http(self, config: Config) -> HttpServer:
        try:
            return HttpServer(config.web, self._endpoints())
        except ListenError as exc:
            raise StartupError(str(exc)) from None
        except OSError as exc:  # ssl.SSLError among them (ssl loads only for TLS)
            raise StartupError(f"web.tls: cannot load certificate or key: {exc}", 2) from None

    def _build_runtime(self, config: Config, running: Runtime | None = None) -> Runtime:
        """Construct sources, scheduler and outputs without starting anything.

        A source or a push output of ``running`` that the new config builds the same
        (its fingerprint) is taken as it is, not replaced: a reload leaves it running.
        """
        sources = list(self.source_builder(config))
        outputs = build_outputs(config, self.store)
        if running is not None:
            sources = _kept(running.sources, sources)
            outputs = _kept(running.outputs, outputs)
        return Runtime(config, sources, Scheduler(self.store, sources), outputs)

    async def _start_runtime(self, runtime: Runtime, running: Sequence[Output] = ()) -> None:
        """Start the scheduler and every output not in ``running`` (kept by a reload)."""
        await runtime.scheduler.start()
        for output in runtime.outputs:
            if any(output is kept for kept in running):
                continue
            try:
                await output.start()
            except Exception as exc:
                self._log.error("output start failed", output=output.name, error=repr(exc))

    async def _stop_runtime(
        self, runtime: Runtime, *, flush_seconds: float, keep: Sequence[Output] = ()
    ) -> None:
        """Stop the scheduler and every output not in ``keep``, each joined in its bound."""
        await runtime.scheduler.stop()
        for output in runtime.outputs:
            if any(output is kept for kept in keep):
                continue
            try:
                await asyncio.wait_for(
                    output.stop(flush_seconds),
                    timeout=output.stop_seconds(flush_seconds) + 0.5,
                )
            except Exception as exc:
                self._log.warning("output stop failed", output=output.name, error=repr(exc))

    def request_stop(self) -> None:
        """Ask the daemon to shut down (signal handlers and tests)."""
        self._stop.set()

    def request_reload(self) -> None:
        """SIGHUP: reload in a task; during a reload, one more reload after it.

        Coalesced: however many arrive during a reload, one more follows it, and
        it reads the file as it is then, so the last file written is applied.
        """
        if self._reload_task is None or self._reload_task.done():
            self._reload_task = asyncio.create_task(self._reloads(), name="reload")
        else:
            self._reload_again = True

    async def _reloads(self) -> None:
        while True:
            self._reload_again = False
            await self.reload()
            if not self._reload_again:
                return
            self._log.info("reloading again", why="SIGHUP during the last reload")

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the exit status."""
        loop = asyncio.get_running_loop()
        self.http = self._make_http(self.config)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            async with self._lifecycle:
                runtime = self._build_runtime(self.config)
                self.runtime = runtime
                await self._start_runtime(runtime)
            # Every runner that will use the worker started at process start has taken
            # it: none did (no device source here), so it ends now.
            prestart.discard()
            # Only now: a SIGHUP during start-up is ignored (cli sets SIG_IGN first)
            # instead of racing a second runtime against the first.
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
            self.exposition.start_prerender()
            self.http.start()
            host, port = self.http.address
            self._log.info(
                "listening",
                address=join_host_port(host, port),
                url=self.http.url,
                version=__version__,
                sources=[s.name for s in runtime.sources],
            )
            await self._stop.wait()
        finally:
            loop.remove_signal_handler(signal.SIGHUP)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # removal restored the fatal default
            await self.shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return 0

    async def shutdown(self) -> None:
        """Ordered shutdown: polls and workers, then HTTP, then a final flush of outputs."""
        started = time.monotonic()
        self._log.info("shutting down")
        reload_task, self._reload_task = self._reload_task, None
        if reload_task is not None and not reload_task.done():
            # A reload may be starting a runtime: end it first, then stop whatever it left.
            reload_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reload_task
        async with self._lifecycle:
            runtime, self.runtime = self.runtime, None
            for retiring in self._retiring:
                await retiring.scheduler.stop()
            self._retiring.clear()
            if runtime is not None:
                await runtime.scheduler.stop()
            if self.http is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.http.stop)
                self.http = None
            await asyncio.get_running_loop().run_in_executor(None, self.exposition.stop_prerender)
            if runtime is not None:
                remaining = max(0.2, SHUTDOWN_BUDGET_SECONDS - (time.monotonic() - started))
                for output in runtime.outputs:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(
                            output.stop(min(OUTPUT_FLUSH_SECONDS, remaining)), timeout=remaining
                        )
        self._log.info("stopped", seconds=round(time.monotonic() - started, 3))

    async def reload(self) -> bool:
        """Re-read the config; keep the old one running when the new one is invalid.

        Everything that can fail (parsing, building sources and outputs, binding
        a new address, loading certificates) happens before the old runtime
        stops, so a rejected reload leaves the daemon exactly as it was.
        """
        async with self._lifecycle:
            if self.runtime is None or self.http is None:
                return False
            prepared = self._prepare_reload(self.runtime, self.http)
            if prepared is None:
                return False
            new, runtime, new_http = prepared
            log.configure(new.log.level, new.log.format)
            prometheus_setup.reconfigure(self.exposition, new)
            unchanged, kept = await self._swap_runtime(self.runtime, runtime)
            if new_http is not None:
                old_http, self.http = self.http, new_http
                new_http.start()
                await asyncio.get_running_loop().run_in_executor(None, old_http.stop)
            self.config = new
            self._log.info(
                "config reloaded",
                sources=sorted(s.name for s in runtime.sources),
                unchanged=unchanged,
                outputs_unchanged=[o.name for o in kept],
            )
            return True

    def _prepare_reload(
        self, current: Runtime, http: HttpServer
    ) -> tuple[Config, Runtime, HttpServer | None] | None:
        """The new config, its runtime and (on a new address) its HTTP server; None: rejected.

        Nothing running is touched but the current server's settings, and only once
        everything else has been built.
        """
        try:
            new = load_config(self.config_path, os.environ, self.overrides)
        except ConfigError as exc:
            for problem in exc.problems:
                self._log.error("reload rejected", problem=problem)
            return None
        if dict(catalog_for(new)) != dict(self.store.catalog):
            self._log.error(
                "reload rejected",
                problem="workload.k8s.pod_labels (enabled, keys) changes the exported label"
                " set: restart the daemon to apply it",
            )
            return None
        try:
            runtime = self._build_runtime(new, current)
        except Exception as exc:
            self._log.error("reload rejected", problem=f"cannot build sources: {exc!r}")
            return None
        new_http = None
        same_address = parse_listen_address(new.web.listen_address) == parse_listen_address(
            self.config.web.listen_address
        )
        try:
            if same_address:
                # Same socket; new credentials, certificates (re-read from disk,
                # so renewed files take effect) and limits for the next request.
                http.reconfigure(new.web)
            else:
                new_http = self._make_http(new)
        except StartupError as exc:
            self._log.error("reload rejected", problem=str(exc))
            return None
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self._log.error(
                "reload rejected", problem=f"web.tls: cannot load certificate or key: {exc}"
            )
            return None
        return new, runtime, new_http

    async def _swap_runtime(self, old: Runtime, runtime: Runtime) -> tuple[list[str], list[Output]]:
        """Stop the ``old`` runtime and start ``runtime`` in its place.

        Sources and outputs the new runtime shares with the old keep running; the
        others hand on what they kept. Returns the names of the unchanged sources and
        the outputs kept.
        """
        self.runtime = runtime
        previous = {source.name: source for source in old.sources}
        unchanged = [s.name for s in runtime.sources if previous.get(s.name) is s]
        for name in unchanged:  # left running: not stopped, not restarted
            old.scheduler.hand_over(name, runtime.scheduler)
        # Until it is fully stopped, a shutdown that cancels this reload must
        # still find the old runtime (and its workers) to stop.
        kept = [o for o in runtime.outputs if any(o is p for p in old.outputs)]
        self._retiring.append(old)
        await self._stop_runtime(old, flush_seconds=OUTPUT_FLUSH_SECONDS, keep=kept)
        self._retiring.remove(old)
        for source in runtime.sources:
            if source.name in previous and source.name not in unchanged:
                source.adopt(previous[source.name])
        # A replaced output hands on what it kept (the writer's holds and counts),
        # once it is stopped: never two of one name at work.
        replaced = {o.name: o for o in old.outputs if not any(o is k for k in kept)}
        for output in runtime.outputs:
            if output.name in replaced and not any(output is k for k in kept):
                output.adopt(replaced[output.name])
        await self._start_runtime(runtime, running=kept)
        names = {s.name for s in runtime.sources}
        for name in self.store.names():
            if name not in names:
                self.store.unregister(name)
        for source in old.sources:
            if source.name not in names:
                source.removed()
        return unchanged, kept
