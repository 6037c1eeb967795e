"""outputs.otlp merged with the OTEL_* variables, as the OpenTelemetry spec orders and parses them."""

from __future__ import annotations

import pytest

from exporter.config import load_config
from exporter.config.otlp_env import NO_LIMIT_SECONDS, parse_headers, resolve
from exporter.config.schema import OtlpOutputConfig
from exporter.errors import ConfigError


def settings(env=None, **config):
    resolution = resolve(OtlpOutputConfig(enabled=True, **config), env or {})
    assert resolution.problems == []
    assert resolution.settings is not None
    return resolution.settings, resolution.warnings


def problems(env=None, **config):
    resolution = resolve(OtlpOutputConfig(enabled=True, **config), env or {})
    assert resolution.settings is None
    return resolution.problems


def test_defaults_follow_the_spec():
    s, warnings = settings()
    assert s.protocol == "http/protobuf"  # the spec's default transport
    assert s.endpoint == "http://localhost:4318/v1/metrics"
    assert (s.timeout, s.interval, s.compression, s.temporality) == (
        10.0,
        30.0,
        "gzip",
        "cumulative",
    )
    assert s.secure is False and s.headers == {} and not s.sdk_disabled
    assert set(s.origins.values()) == {"default"}
    assert warnings == []


def test_grpc_default_endpoint():
    s, _ = settings(protocol="grpc")
    assert (s.endpoint, s.secure) == ("localhost:4317", False)


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/metrics"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/metrics"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/otlp/"}, "https://c/otlp/v1/metrics"),
        # The base URL always gets the signal path, even one that already looks like it.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c/v1/metrics"}, "http://c/v1/metrics/v1/metrics"),
        # The per-signal URL is used as it is; a URL without a path goes to the root.
        (
            {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "https://c.example/v1/m"},
            "https://c.example/v1/m",
        ),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318"}, "http://c:4318/"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://generic:4318",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://specific:4318/x",
            },
            "http://specific:4318/x",
        ),
        (
            {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://g"},
            "http://g/v1/metrics",
        ),
    ],
)
def test_http_endpoints_from_the_environment(env, endpoint):
    s, _ = settings(env)
    assert s.endpoint == endpoint


@pytest.mark.parametrize(
    ("configured", "endpoint"),
    [
        ("http://c:4318", "http://c:4318/v1/metrics"),
        ("http://c:4318/v1/metrics", "http://c:4318/v1/metrics"),
        ("https://vendor.example/otlp", "https://vendor.example/otlp/v1/metrics"),
    ],
)
def test_configured_http_endpoint_gets_the_path_once(configured, endpoint):
    env = {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://ignored:1/"}
    s, _ = settings(env, endpoint=configured)
    assert s.endpoint == endpoint
    assert s.origins["endpoint"] == "config"


@pytest.mark.parametrize(
    ("env", "config", "target", "secure"),
    [
        ({}, {"endpoint": "https://c:4317"}, "c:4317", True),
        ({}, {"endpoint": "http://c:4317"}, "c:4317", False),
        ({}, {"endpoint": "c:4317"}, "c:4317", True),  # no scheme: insecure defaults to false
        ({}, {"endpoint": "c:4317", "insecure": True}, "c:4317", False),
        ({"OTEL_EXPORTER_OTLP_INSECURE": "TRUE"}, {"endpoint": "c:4317"}, "c:4317", False),
        # The scheme wins over insecure from the environment.
        ({"OTEL_EXPORTER_OTLP_INSECURE": "true"}, {"endpoint": "https://c:4317"}, "c:4317", True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://env:4317"}, {}, "env:4317", True),
    ],
)
def test_grpc_targets_and_transport_security(env, config, target, secure):
    s, _ = settings(env, protocol="grpc", **config)
    assert (s.endpoint, s.secure) == (target, secure)


def test_explicit_config_wins_over_every_variable():
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "none",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
        "OTEL_METRIC_EXPORT_INTERVAL": "5000",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=env,b=env",
    }
    s, warnings = settings(
        env,
        protocol="http/protobuf",
        timeout=2.5,
        compression="gzip",
        temporality="cumulative",
        interval=7.0,
        headers={"B": "config"},
    )
    assert (s.protocol, s.timeout, s.compression, s.temporality, s.interval) == (
        "http/protobuf",
        2.5,
        "gzip",
        "cumulative",
        7.0,
    )
    assert s.headers == {"a": "env", "b": "config"}  # merged key by key, config last
    explicit = ("protocol", "timeout", "compression", "temporality", "interval")
    assert {s.origins[key] for key in explicit} == {"config"}
    assert warnings == []


def test_variables_apply_when_config_is_silent():
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "2500",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "9000",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "NONE",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "LowMemory",
        "OTEL_METRIC_EXPORT_INTERVAL": "15000",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "Api-Key=s%3Dcret,x-scope=team%20a",
    }
    s, warnings = settings(env)
    assert (s.protocol, s.timeout, s.compression, s.temporality, s.interval) == (
        "grpc",
        2.5,
        "none",
        "lowmemory",
        15.0,
    )
    assert s.headers == {"api-key": "s=cret", "x-scope": "team a"}
    assert s.origins["timeout"] == "env OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"
    assert s.origins["interval"] == "env OTEL_METRIC_EXPORT_INTERVAL"
    assert warnings == []


def test_zero_timeout_means_no_limit():
    s, _ = settings({"OTEL_EXPORTER_OTLP_TIMEOUT": "0"})
    assert s.timeout == NO_LIMIT_SECONDS


@pytest.mark.parametrize(
    ("var", "text"),
    [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "-5"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
        ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "sometimes"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "udp"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "50"),
    ],
)
def test_unparsable_values_are_ignored_with_a_warning(var, text):
    s, warnings = settings({var: text, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})
    defaults, _ = settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})
    assert s == defaults
    assert len(warnings) == 1 and var in warnings[0] and text in warnings[0]


@pytest.mark.parametrize(
    ("env", "config", "key", "words"),
    [
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            {},
            "protocol",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
            {},
            "endpoint",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        ({}, {"endpoint": "ftp://c"}, "endpoint", "ftp://c"),
        ({}, {"endpoint": "http://c:99999"}, "endpoint", "port"),
        ({}, {"endpoint": "grpc://c:4317", "protocol": "grpc"}, "endpoint", "host:port"),
        (
            {},
            {"endpoint": "https://c:4317", "protocol": "grpc", "insecure": True},
            "insecure",
            "https",
        ),
        (
            {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
            {},
            "certificate_file",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ),
        (
            {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": __file__},
            {},
            "client_key_file",
            "come together",
        ),
    ],
)
def test_what_cannot_be_ignored_is_a_problem_naming_its_source(env, config, key, words):
    found = problems(env, **config)
    assert [k for k, _ in found] == [key]
    assert words in found[0][1]


def test_odd_boolean_reads_as_false_with_a_warning():
    s, warnings = settings({"OTEL_EXPORTER_OTLP_INSECURE": "yes"}, protocol="grpc", endpoint="c:1")
    assert s.secure is True
    assert warnings == ["OTEL_EXPORTER_OTLP_INSECURE='yes' is not true or false; read as false"]


def test_sdk_disabled_and_empty_variables():
    s, _ = settings({"OTEL_SDK_DISABLED": "True", "OTEL_EXPORTER_OTLP_TIMEOUT": ""})
    assert s.sdk_disabled is True
    assert s.origins["timeout"] == "default"


def test_headers_parse_like_w3c_baggage():
    headers, bad = parse_headers(" a = 1 ,B=x%2Cy,, novalue ,=v,c d=1")
    assert headers == {"a": "1", "b": "x,y"}
    assert bad == ["novalue", "=v", "c d=1"]


def test_config_loader_reports_environment_problems():
    # The environment given to load_config (the daemon's own, by default) is checked.
    env = {
        "ACCEL_EXPORTER_OUTPUTS__OTLP__ENABLED": "true",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
    }
    with pytest.raises(ConfigError) as err:
        load_config(None, env=env)
    assert any(
        "outputs.otlp.protocol" in p and "OTEL_EXPORTER_OTLP_PROTOCOL" in p
        for p in err.value.problems
    )
    # Disabled, the same environment is nobody's business.
    assert load_config(None, env={}).outputs.otlp.enabled is False


def test_config_loader_checks_timings():
    with pytest.raises(ConfigError) as err:
        load_config(
            None,
            env={
                "ACCEL_EXPORTER_OUTPUTS__OTLP__ENABLED": "true",
                "ACCEL_EXPORTER_OUTPUTS__OTLP__INTERVAL": "10ms",
                "ACCEL_EXPORTER_OUTPUTS__OTLP__TIMEOUT": "0s",
            },
        )
    text = " ".join(err.value.problems)
    assert "outputs.otlp.interval" in text and "outputs.otlp.timeout" in text
