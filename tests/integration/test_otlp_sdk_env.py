"""The SDK's own OTLP exporters read the OTEL_* variables; config passed to them wins.

Real exporters (built by the daemon's ``build_exporter``) against real OTLP/HTTP
and OTLP/gRPC receivers, with the variables in the process environment, as a
daemon would have them. Each batch comes from a store view.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics.export import MetricExportResult
from opentelemetry.sdk.resources import Resource

from exporter.config.otlp import resolve
from exporter.config.outputs import OtlpOutputConfig
from exporter.model import OK, Reading, Snapshot
from exporter.outputs.otlp_batch import BatchBuilder
from exporter.outputs.otlp_transport import build_exporter, temporality_of
from exporter.store import Store
from tests.helpers.otlp_receiver import GrpcReceiver, HttpReceiver

OTEL_VARS = ("OTEL_EXPORTER_OTLP_", "OTEL_METRIC", "OTEL_SDK", "REQUESTS_CA", "CURL_CA")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch) -> Iterator[None]:
    # Only what each test sets: a developer's shell must not steer these exporters.
    for name in list(os.environ):
        if name.startswith(OTEL_VARS):
            monkeypatch.delenv(name)
    yield


def batch():
    store = Store()
    store.put(Snapshot("t", (Reading("accel_host_cpus", (), 4.0),), OK, 1.0, 1.0, 1.0, 0.01, 1e9))
    return BatchBuilder(Resource({"service.name": "t"})).build(store.view())


def exporter_for(**config):
    # As the daemon does: resolved with the process environment the SDK reads too.
    resolution = resolve(OtlpOutputConfig(enabled=True, **config), os.environ)
    assert resolution.settings is not None
    return build_exporter(resolution.settings)


def export(exporter) -> MetricExportResult:
    try:
        return exporter.export(batch(), timeout_millis=10_000)
    finally:
        exporter.shutdown()


def test_http_base_endpoint_headers_and_compression_from_the_environment(monkeypatch):
    receiver = HttpReceiver()
    try:
        # A base URL: the SDK appends v1/metrics (the receiver answers only there).
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret,x-scope=env")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")
        exporter = exporter_for(protocol="http/protobuf", headers={"X-Scope": "config"})
        assert export(exporter) is MetricExportResult.SUCCESS
        (got,) = receiver.requests
        assert got.headers["api-key"] == "s=cret"  # percent-decoded by the SDK
        assert got.headers["x-scope"] == "config"  # the configured header wins, key by key
        assert "content-encoding" not in got.headers  # the variable, not our gzip default
    finally:
        receiver.close()


def test_http_compression_defaults_to_gzip_when_nothing_says_otherwise(monkeypatch):
    receiver = HttpReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.endpoint + "/v1/metrics")
        assert export(exporter_for()) is MetricExportResult.SUCCESS
        (got,) = receiver.requests
        assert got.headers["content-encoding"] == "gzip"
    finally:
        receiver.close()


def test_grpc_endpoint_and_headers_from_the_environment(monkeypatch):
    receiver = GrpcReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-tenant=team-a")
        exporter = exporter_for(protocol="grpc")
        assert export(exporter) is MetricExportResult.SUCCESS
        (got,) = receiver.requests
        assert got.headers["x-tenant"] == "team-a"
    finally:
        receiver.close()


@pytest.mark.parametrize(
    ("env", "config", "expected"),
    [
        ({}, {}, "cumulative"),
        ({"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "Delta"}, {}, "delta"),
        ({"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "lowmemory"}, {}, "lowmemory"),
        (
            {"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta"},
            {"temporality": "cumulative"},
            "cumulative",
        ),
        ({}, {"temporality": "delta"}, "delta"),
    ],
)
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_temporality_is_what_the_exporter_read(monkeypatch, env, config, expected, protocol):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exporter = exporter_for(protocol=protocol, endpoint="http://127.0.0.1:9", **config)
    try:
        assert temporality_of(exporter) == expected
    finally:
        exporter.shutdown()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_timeout_variable_is_milliseconds(monkeypatch, protocol):
    # The Python SDK would read 1500 as seconds (opentelemetry-python#4044). Its retries
    # end an export long before either figure, so the exporter's own setting is read.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1500")
    exporter = exporter_for(protocol=protocol, endpoint="http://127.0.0.1:9")
    try:
        timeout = exporter._timeout if protocol == "grpc" else exporter._client._timeout
        assert timeout == 1.5
    finally:
        exporter.shutdown()
