"""The OTLP output's thread, accounting, logging and shutdown, with exporters it is given."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from structlog.testing import capture_logs

from exporter.config.otlp import resolve
from exporter.config.outputs import OtlpOutputConfig
from exporter.model import OK, Reading, Snapshot
from exporter.outputs.otlp import OtlpOutput
from exporter.store import Store
from tests.helpers.wait import eventually


class Recorder(MetricExporter):
    """Answers ``results`` in turn (the last one forever) and keeps every batch."""

    def __init__(self, *results: MetricExportResult, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.results = list(results) or [MetricExportResult.SUCCESS]
        self.batches: list[Any] = []
        self.gate = gate
        self.shut = threading.Event()
        self.entered = threading.Event()  # an export is in flight (or has been)
        self.events: list[str] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        self.events.append("export")
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        self.events.append("returned")
        self.batches.append(metrics_data)
        if self.results[0] is MetricExportResult.FAILURE:
            # What the SDK's exporters do: say why through stdlib logging.
            logging.getLogger("opentelemetry.exporter.test").error("collector said 503")
        return self.results.pop(0) if len(self.results) > 1 else self.results[0]

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.events.append("shutdown")
        self.shut.set()


def settings(interval: float = 0.1):
    resolution = resolve(OtlpOutputConfig(enabled=True, interval=interval), {})
    assert resolution.settings is not None
    return resolution.settings


def make(store: Store, exporter: MetricExporter, interval: float = 0.1, **kw: Any) -> OtlpOutput:
    return OtlpOutput(
        settings(interval), store, {"service.name": "t"}, exporter_factory=lambda _: exporter, **kw
    )


def store_with_data() -> Store:
    store = Store()
    now = time.time()
    store.put(
        Snapshot(
            "t", (Reading("accel_host_cpus", (), 4.0),), OK, now, now, time.monotonic(), 0.01, 60.0
        )
    )
    return store


def counts(store: Store) -> dict[str, float]:
    return {
        r.labels[0]: float(r.value)
        for r in store.view().readings("accel_exporter_otlp_exports_total")
    }


def wait(predicate, timeout: float = 30.0) -> None:
    eventually(predicate, timeout=timeout, interval=0.01)


def drive(store: Store, exporter: MetricExporter, until, **kw: Any) -> OtlpOutput:
    """Start an output, wait (off the loop) until ``until()``, stop it; the stopped output."""

    async def go() -> OtlpOutput:
        out = make(store, exporter, **kw)
        await out.start()
        await asyncio.to_thread(wait, until)
        await out.stop(2.0)
        return out

    return asyncio.run(go())


def test_exports_are_counted_in_the_store_and_status():
    store = store_with_data()
    exporter = Recorder()
    out = drive(store, exporter, lambda: len(exporter.batches) >= 3)
    assert counts(store)["success"] == len(exporter.batches) >= 3
    status = out.status()
    assert status["state"] == "stopped" and status["last_success"] is not None
    assert status["exports"]["success"] == len(exporter.batches)
    assert exporter.shut.is_set()


def test_failures_are_logged_once_then_sparingly_and_recovery_once():
    store = store_with_data()
    results = [MetricExportResult.FAILURE] * 6 + [MetricExportResult.SUCCESS]
    exporter = Recorder(*results)
    with capture_logs() as logs:
        out = drive(store, exporter, lambda: counts(store)["success"] >= 1, log_every=3600.0)
    failed = [e for e in logs if e["event"].startswith("otlp export fail")]
    assert len(failed) == 1
    assert failed[0]["error"] == "collector said 503"
    assert [e["failed_exports"] for e in logs if e["event"] == "otlp export recovered"] == [6]
    assert counts(store)["failure"] == 6
    assert out.status()["consecutive_failures"] == 0


def test_a_failure_after_the_log_interval_is_logged_again_with_a_count():
    store = store_with_data()
    exporter = Recorder(MetricExportResult.FAILURE)
    with capture_logs() as logs:
        out = drive(store, exporter, lambda: counts(store)["failure"] >= 8, log_every=0.25)
    failed = [e for e in logs if e["event"].startswith("otlp export fail")]
    assert 2 <= len(failed) < counts(store)["failure"]
    assert failed[1]["event"] == "otlp export failing" and failed[1]["failures"] >= 1
    assert "503" in out.status()["last_error"]


def test_stop_flushes_exactly_once():
    store = store_with_data()
    exporter = Recorder()

    async def go():
        out = make(store, exporter, interval=3600.0)
        await out.start()
        await asyncio.sleep(0.2)
        assert exporter.batches == []
        # Published before any export, so the series exist from the start.
        assert counts(store) == {"success": 0.0, "failure": 0.0}
        await out.stop(2.0)

    asyncio.run(go())
    assert len(exporter.batches) == 1
    assert counts(store)["success"] == 1


def test_stop_aborts_a_hung_export_at_the_deadline():
    store = store_with_data()
    gate = threading.Event()

    class Hung(Recorder):
        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            super().shutdown()
            gate.set()  # like gRPC: shutting down cancels the call in flight

    exporter = Hung(MetricExportResult.FAILURE, gate=gate)

    async def go():
        out = make(store, exporter)
        await out.start()
        assert await asyncio.to_thread(exporter.entered.wait, 30)  # the first export is stuck
        await asyncio.wait_for(out.stop(0.3), timeout=10)
        return out

    out = asyncio.run(go())
    # Only the abort (the exporter's shutdown) releases the stuck export; had stop not
    # aborted it, the export would still hang and the output would end "abandoned".
    assert exporter.events[:3] == ["export", "shutdown", "returned"]
    assert out.status()["state"] == "stopped"


def test_an_export_that_ignores_shutdown_is_abandoned_and_cannot_clobber_its_successor():
    store = store_with_data()
    gate = threading.Event()
    stuck = Recorder(gate=gate)

    async def go():
        first = make(store, stuck)
        await first.start()
        assert await asyncio.to_thread(stuck.entered.wait, 30)  # its export hangs
        await asyncio.wait_for(first.stop(0.2), timeout=10)
        second = make(store, Recorder())
        await second.start()
        await asyncio.to_thread(wait, lambda: counts(store)["success"] >= 2)
        gate.set()  # the abandoned export finally returns...
        await asyncio.to_thread(first._done.wait, 10)
        seen = counts(store)["success"]
        await second.stop(2.0)
        return first, seen

    first, seen = asyncio.run(go())
    assert first.status()["state"] == "abandoned"
    assert seen >= 2  # ...and did not overwrite the successor's counter


def test_a_reload_continues_the_counter():
    store = store_with_data()

    async def go():
        for _ in range(2):
            out = make(store, Recorder(), interval=3600.0)
            await out.start()
            await out.stop(2.0)

    asyncio.run(go())
    assert counts(store)["success"] == 2


def test_otel_sdk_disabled_means_no_push(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    store = store_with_data()
    exporter = Recorder()
    out = OtlpOutput.from_config(OtlpOutputConfig(enabled=True, interval=0.1), store)
    out._exporter_factory = lambda _: exporter

    async def go():
        await out.start()
        await asyncio.sleep(0.3)
        await out.stop(1.0)

    asyncio.run(go())
    assert exporter.batches == [] and out.status()["state"] == "disabled"


def test_an_exporter_that_raises_counts_as_a_failure_and_the_thread_goes_on():
    store = store_with_data()

    class Raising(Recorder):
        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
            self.batches.append(metrics_data)
            raise RuntimeError("exporter bug")

    exporter = Raising()
    out = drive(store, exporter, lambda: len(exporter.batches) >= 3)
    assert counts(store)["failure"] >= 3
    assert "exporter bug" in out.status()["last_error"]


def test_an_unreadable_certificate_fails_start_cleanly(tmp_path):
    store = store_with_data()
    resolution = resolve(
        OtlpOutputConfig(enabled=True, protocol="grpc", endpoint="https://c:4317"), {}
    )
    assert resolution.settings is not None
    # The file vanished between the config check and the start.
    bad = dataclasses.replace(resolution.settings, certificate_file=str(tmp_path / "gone.pem"))
    out = OtlpOutput(bad, store, {})

    async def go():
        await out.start()
        await out.stop(1.0)

    with capture_logs() as logs:
        asyncio.run(go())
    assert out.status()["state"] == "failed"
    assert "gone.pem" in out.status()["last_error"]
    assert [e["event"] for e in logs] == ["otlp push cannot start"]


def test_stop_aborts_the_export_in_flight_so_the_final_flush_gets_the_budget():
    # A collector that accepts and never answers holds an export for its whole timeout;
    # shutting the SDK exporter down cancels it (gRPC) but leaves that exporter unusable.
    store = store_with_data()
    gate = threading.Event()

    class Silent(Recorder):
        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            super().shutdown()
            gate.set()

    stuck = Silent(MetricExportResult.FAILURE, gate=gate)
    fresh = Recorder()
    made = [stuck, fresh]

    async def go():
        out = OtlpOutput(settings(0.1), store, {}, exporter_factory=lambda _: made.pop(0))
        await out.start()
        await asyncio.to_thread(wait, lambda: out.status()["exporting"])
        await asyncio.wait_for(out.stop(1.5), timeout=10)
        return out

    out = asyncio.run(go())
    assert out.status()["state"] == "stopped"
    # The final flush went out, through a new exporter, and was the success it should be.
    assert len(fresh.batches) == 1 and fresh.shut.is_set()
    assert counts(store) == {"success": 1.0, "failure": 1.0}
