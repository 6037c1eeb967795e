"""OTLP push end to end: the real daemon, real OTLP/HTTP and OTLP/gRPC receivers.

The sources poll hourly in the equality tests, so after their first polls the
store stands still and every later export must carry exactly what /metrics shows.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.catalog.otel import INSTRUMENTS
from tests.e2e.test_tls_auth import pki  # noqa: F401 (a fixture: the test CA and certificates)
from tests.helpers.daemon import Daemon, value
from tests.helpers.otlp_compare import EXPECTED_KIND, expected, points, resource
from tests.helpers.otlp_receiver import (
    GrpcReceiver,
    HttpReceiver,
    SilentServer,
    Tls,
    free_port,
)
from tests.helpers.wait import eventually

FIXED = "tests.helpers.fixed_sources:sources"
EXPORTS = "accel.exporter.otlp.exports"
CUMULATIVE, DELTA = 2, 1
# How long the receiver stays down in the outage test (the issue asks for a minute).
OUTAGE_SECONDS = float(os.environ.get("OTLP_OUTAGE_SECONDS", "60"))
DOWNWARD_API = {"NODE_NAME": "node-a", "POD_NAME": "accel-exporter-x1", "POD_NAMESPACE": "mon"}


def otlp(endpoint: str, protocol: str, **extra: Any) -> dict[str, Any]:
    return {
        "sources": {"host": {"interval": "1h"}},
        "outputs": {
            "otlp": {
                "enabled": True,
                "endpoint": endpoint,
                "protocol": protocol,
                "interval": "300ms",
                "timeout": "3s",
                **extra,
            }
        },
    }


def receiver_for(protocol: str, tls: Tls | None = None) -> HttpReceiver | GrpcReceiver:
    return HttpReceiver(tls=tls) if protocol == "http/protobuf" else GrpcReceiver(tls=tls)


def series(name: str, **attributes: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A comparison key; attribute names use __ for dots (hw__id -> hw.id)."""
    return name, tuple(sorted((k.replace("__", "."), v) for k, v in attributes.items()))


GPU = {"device": "0", "hw__id": "GPU-8c5a0c1e-0000-4000-8000-000000000001"}
GPU2 = {"device": "1", "hw__id": "GPU-8c5a0c1e-0000-4000-8000-000000000002"}


def exports(d: Daemon, result: str) -> float:
    return value(d.metrics(), "accel_exporter_otlp_exports_total", result=result) or 0.0


def without_exports(series: dict[Any, Any]) -> dict[Any, Any]:
    return {key: v for key, v in series.items() if key[0] != EXPORTS}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def pushed_later(receiver: HttpReceiver | GrpcReceiver, since: float, nth: int = 2) -> Any:
    """The nth request received after ``since`` (the first may hold a view taken before)."""
    receiver.wait(lambda r: sum(x.at > since for x in receiver.requests) >= nth)
    return sorted((r for r in receiver.requests if r.at > since), key=lambda r: r.at)[nth - 1]


def settled(d: Daemon) -> str:
    """/metrics once every source polled (they will not poll again during the test).

    The device sources too: on this machine they end unavailable, and they must
    have said so before the comparison, or the push would show more than the text.
    """
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    d.wait_metric("accel_exporter_source_up", 1, source="fixed")
    d.wait_for(lambda: d.get("/readyz").status == 200, what="every source's first poll")
    return d.metrics()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_push_carries_what_metrics_shows(daemon_factory, protocol):
    receiver = receiver_for(protocol)
    try:
        env = {
            **DOWNWARD_API,
            "OTEL_RESOURCE_ATTRIBUTES": "k8s.cluster.name=gpu%2Da,service.name=overridden",
            "OTEL_SERVICE_NAME": "accel-exporter-test",
        }
        config = otlp(
            receiver.endpoint,
            protocol,
            headers={"X-Tenant": "team-a"},
            resource_attributes={"deployment.environment.name": "ci"},
        )
        d = daemon_factory(config, env=env, extra_sources=FIXED)
        text = settled(d)
        promised = expected(text)
        got = pushed_later(receiver, time.time())
        values, shapes = points(got.request)

        assert without_exports(values) == without_exports(promised)
        assert {k for k in values if k[0] == EXPORTS} == {k for k in promised if k[0] == EXPORTS}
        # Semantic-convention names and the merged utilization instrument are really there.
        assert values[series("hw.gpu.utilization", **GPU, hw__gpu__task="encoder")] == 0.125
        assert values[series("hw.power", **GPU, hw__type="gpu")] == 312.25
        for name, (kind, unit, monotonic, temporality) in shapes.items():
            mapping = INSTRUMENTS[name][0]
            assert (kind, monotonic) == EXPECTED_KIND[mapping.instrument], name
            assert unit == mapping.unit, name
            assert temporality in (0, CUMULATIVE), name

        attrs = resource(got.request)
        version = next(k for k in values if k[0] == "accel.exporter.build.info")[1]
        assert attrs["service.name"] == "accel-exporter-test"
        assert attrs["service.version"] == dict(version)["version"]
        assert attrs["host.name"] == attrs["k8s.node.name"] == "node-a"
        assert attrs["k8s.pod.name"] == "accel-exporter-x1"
        assert attrs["k8s.namespace.name"] == "mon"
        assert attrs["k8s.cluster.name"] == "gpu-a"
        assert attrs["deployment.environment.name"] == "ci"
        assert got.headers.get("x-tenant") == "team-a"
        assert exports(d, "success") >= 1
        assert d.status()["outputs"]["otlp"]["state"] == "running"
    finally:
        receiver.close()


def test_delta_temporality_from_the_environment(daemon_factory):
    receiver = HttpReceiver()
    try:
        env = {"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "Delta"}
        d = daemon_factory(otlp(receiver.endpoint, "http/protobuf"), env=env, extra_sources=FIXED)
        text = settled(d)
        promised = expected(text)
        # Its previous export, too, must have seen the settled store.
        got = pushed_later(receiver, time.time(), nth=3)
        values, shapes = points(got.request)
        for name, (kind, _, monotonic, temporality) in shapes.items():
            if kind == "histogram" or (kind == "sum" and monotonic):
                assert temporality == DELTA, name
            elif kind == "sum":
                assert temporality == CUMULATIVE, name  # up-down counters stay cumulative
        # Nothing moved since the previous export: every counter delta is zero, gauges are equal.
        energy = next(k for k in values if k[0] == "hw.energy")
        assert values[energy] == 0.0 and promised[energy] == 123456789.5
        util = next(k for k in values if k[0] == "hw.gpu.utilization")
        assert values[util] == promised[util]
        poll = next(k for k in values if k[0] == "accel.exporter.source.poll.duration")
        assert values[poll][3] == 0
    finally:
        receiver.close()


@pytest.mark.slow
def test_receiver_down_for_a_minute_then_back(daemon_factory):
    port = free_port()
    config = otlp(f"http://127.0.0.1:{port}", "grpc", interval="250ms", timeout="1s")
    d = daemon_factory(config, extra_sources=FIXED)
    settled(d)
    d.wait_for(lambda: exports(d, "failure") >= 20, timeout=60, what="20 failed exports")
    baseline = rss_bytes(d.pid)
    failures = exports(d, "failure")
    down_until = time.monotonic() + OUTAGE_SECONDS
    while time.monotonic() < down_until:
        assert value(d.metrics(), "accel_exporter_source_up", source="fixed") == 1
        time.sleep(1.0)
    grown = rss_bytes(d.pid) - baseline
    assert exports(d, "failure") > failures + OUTAGE_SECONDS / 4  # it kept trying all along
    assert exports(d, "success") == 0
    receiver = GrpcReceiver(port)
    try:
        receiver.wait(timeout=30)
        d.wait_for(lambda: exports(d, "success") >= 3, timeout=30, what="exports resuming")
        assert d.proc is not None and d.proc.poll() is None
        assert grown < 5 * 1024 * 1024, (
            f"RSS grew by {grown / 1e6:.1f} MB while the receiver was down"
        )
        warnings = [e for e in d.events if e.get("event", "").startswith("otlp export fail")]
        # One line at the first failure, then at most one a minute: never one per attempt.
        assert 1 <= len(warnings) <= 2 + OUTAGE_SECONDS / 60
        assert any(e.get("event") == "otlp export recovered" for e in d.events)
    finally:
        receiver.close()


def poll_count(d: Daemon) -> int:
    return int(d.status()["sources"]["fixed"]["polls"])


@pytest.mark.serial  # counts polls against wall time: no parallel neighbours
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_silent_receiver_does_not_disturb_polls(daemon_factory, protocol):
    silent = SilentServer()
    try:
        interval = 0.2
        config = otlp(silent.endpoint, protocol, interval="200ms", timeout="2s")
        env = {"FIXED_SOURCE_INTERVAL": str(interval)}
        d = daemon_factory(config, env=env, extra_sources=FIXED)
        d.wait_for(lambda: silent.connections, timeout=20, what="a connection to the receiver")
        d.wait_for(lambda: exports(d, "failure") >= 1, timeout=20, what="a timed-out export")
        start_polls, start = poll_count(d), time.monotonic()
        window = 6.0
        while time.monotonic() - start < window:
            assert d.get("/metrics", timeout=5).status == 200
            time.sleep(0.25)
        polls = poll_count(d) - start_polls
        elapsed = time.monotonic() - start
        # Compared with the schedule itself: the exports hanging meanwhile cost no polls.
        assert polls >= 0.75 * elapsed / interval, (polls, elapsed)
        assert d.status()["outputs"]["otlp"]["consecutive_failures"] >= 1
        code, took = d.stop()
        assert code == 0
        assert took < 5.0, f"SIGTERM shutdown took {took:.1f}s with an export hanging"
    finally:
        silent.close()


def test_refusing_receiver_is_counted_and_logged_sparingly(daemon_factory):
    receiver = HttpReceiver()
    receiver.mode = "refuse"
    try:
        d = daemon_factory(otlp(receiver.endpoint, "http/protobuf", interval="100ms"))
        d.wait_for(lambda: exports(d, "failure") >= 20, timeout=30, what="20 refused exports")
        assert exports(d, "success") == 0
        warnings = [e for e in d.events if e.get("event", "").startswith("otlp export fail")]
        assert len(warnings) == 1
        assert "400" in warnings[0]["error"]
        assert "400" in d.status()["outputs"]["otlp"]["last_error"]
        receiver.mode = "ok"
        d.wait_for(lambda: exports(d, "success") >= 1, timeout=20, what="a successful export")
    finally:
        receiver.close()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_sigterm_flushes_once(daemon_factory, protocol):
    receiver = receiver_for(protocol)
    try:
        d = daemon_factory(otlp(receiver.endpoint, protocol, interval="1h"), extra_sources=FIXED)
        settled(d)
        assert receiver.requests == []
        code, took = d.stop()
        assert code == 0 and took < 5.0
        (final,) = receiver.requests
        values, _ = points(final.request)
        assert values[series("accel.device.up", **GPU2)] == 0.0
    finally:
        receiver.close()


def test_sighup_reload_keeps_pushing_and_the_counter_climbing(daemon_factory):
    receiver = HttpReceiver()
    try:
        d = daemon_factory(otlp(receiver.endpoint, "http/protobuf"))
        d.wait_for(lambda: exports(d, "success") >= 3, what="three exports")
        d.signal(signal.SIGHUP)
        seen = [exports(d, "success")]

        def reloaded_yet() -> bool:
            seen.append(exports(d, "success"))
            return any(e.get("event") == "config reloaded" for e in d.events)

        eventually(reloaded_yet, what="the reload", ignore=())
        reloaded = time.time()
        receiver.wait(lambda r: r.at > reloaded + 0.05)  # the new output pushes
        seen.append(exports(d, "success"))
        assert seen == sorted(seen) and seen[-1] > seen[0]  # continued, never back to zero
        assert sum(e.get("event") == "otlp push started" for e in d.events) == 2
    finally:
        receiver.close()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_mutual_tls_to_the_collector(daemon_factory, pki, protocol):  # noqa: F811
    tls = Tls(str(pki / "server.pem"), str(pki / "server.key"), client_ca=str(pki / "ca.pem"))
    receiver = receiver_for(protocol, tls)
    try:
        # The CA comes from the environment, the client certificate from the config file.
        # REQUESTS_CA_BUNDLE (set in many images) must not replace the configured CA.
        env = {
            "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE": str(pki / "ca.pem"),
            "REQUESTS_CA_BUNDLE": str(pki / "client.pem"),
        }
        config = otlp(
            receiver.endpoint,
            protocol,
            client_certificate_file=str(pki / "client.pem"),
            client_key_file=str(pki / "client.key"),
        )
        d = daemon_factory(config, env=env)
        receiver.wait()  # the server requires a client certificate signed by the CA
        status = d.status()["outputs"]["otlp"]
        assert status["secure"] is True
        assert status["origins"]["certificate_file"] == "env OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE"
    finally:
        receiver.close()
