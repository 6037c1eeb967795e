"""What the OTLP output reads itself: config, protocol, interval, timeout (ms), disabled."""

from __future__ import annotations

import pytest

from exporter.config.loader import load_config
from exporter.config.otlp import NO_LIMIT_SECONDS, SDK_READS, resolve
from exporter.config.outputs import OtlpOutputConfig
from exporter.errors import ConfigError


def settings(env=None, **config):
    resolution = resolve(OtlpOutputConfig(enabled=True, **config), env or {})
    assert resolution.settings is not None, resolution.problems
    return resolution.settings, resolution.warnings


def problems(env=None, **config):
    resolution = resolve(OtlpOutputConfig(enabled=True, **config), env or {})
    assert resolution.settings is None
    return resolution.problems


def test_defaults_leave_the_rest_to_the_sdk():
    s, warnings = settings()
    assert s.protocol == "http/protobuf"  # the spec's default transport
    assert (s.timeout, s.interval, s.compression) == (10.0, 30.0, "gzip")
    # Unset: the SDK's exporter reads its variables and defaults.
    assert (s.endpoint, s.insecure, s.temporality, s.certificate_file) == (None,) * 4
    assert s.headers == {} and not s.sdk_disabled
    assert set(s.origins.values()) == {"default"}
    assert warnings == []


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


def test_a_grpc_target_is_passed_as_configured():
    s, _ = settings(protocol="grpc", endpoint="c:4317", insecure=True)
    assert (s.endpoint, s.insecure) == ("c:4317", True)


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
    assert s.headers == {"b": "config"}  # the SDK merges the variable's under these
    explicit = ("protocol", "timeout", "compression", "temporality", "interval", "headers")
    assert {s.origins[key] for key in explicit} == {"config"}
    assert warnings == []


def test_what_the_sdk_does_not_read_comes_from_the_variables():
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "GRPC",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "2500",  # milliseconds, as the spec says
        "OTEL_EXPORTER_OTLP_TIMEOUT": "9000",
        "OTEL_METRIC_EXPORT_INTERVAL": "15000",
    }
    s, warnings = settings(env)
    assert (s.protocol, s.timeout, s.interval) == ("grpc", 2.5, 15.0)
    assert s.origins["protocol"] == "env OTEL_EXPORTER_OTLP_PROTOCOL"
    assert s.origins["timeout"] == "env OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"
    assert s.origins["interval"] == "env OTEL_METRIC_EXPORT_INTERVAL"
    assert warnings == []


def test_what_the_sdk_reads_is_left_to_it_and_named_in_the_origins():
    env = {variables[-1]: "x" for variables in SDK_READS.values()}
    env["OTEL_EXPORTER_OTLP_METRICS_HEADERS"] = "a=1"
    s, _ = settings(env)
    # Nothing parsed: no compression default either, the variable is the SDK's.
    assert (s.endpoint, s.compression, s.temporality, s.insecure) == (None,) * 4
    assert s.origins["headers"] == "env OTEL_EXPORTER_OTLP_METRICS_HEADERS"
    assert s.origins["certificate_file"] == "env OTEL_EXPORTER_OTLP_CERTIFICATE"
    assert s.origins["temporality"] == "env OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"


def test_zero_timeout_means_no_limit():
    s, _ = settings({"OTEL_EXPORTER_OTLP_TIMEOUT": "0"})
    assert s.timeout == NO_LIMIT_SECONDS


@pytest.mark.parametrize(
    ("var", "text"),
    [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "-5"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "udp"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "50"),
        ("OTEL_SDK_DISABLED", "yes"),
    ],
)
def test_unparsable_values_are_ignored_with_a_warning(var, text):
    s, warnings = settings({var: text})
    defaults, _ = settings({})
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
        ({}, {"endpoint": "ftp://c"}, "endpoint", "ftp://c"),
        ({}, {"endpoint": "http://c:99999"}, "endpoint", "port"),
        ({}, {"endpoint": "grpc://c:4317", "protocol": "grpc"}, "endpoint", "host:port"),
        (
            {},
            {"endpoint": "https://c:4317", "protocol": "grpc", "insecure": True},
            "insecure",
            "https",
        ),
        ({}, {"client_certificate_file": __file__}, "client_key_file", "come together"),
    ],
)
def test_what_cannot_be_ignored_is_a_problem_naming_its_source(env, config, key, words):
    found = problems(env, **config)
    assert [k for k, _ in found] == [key]
    assert words in found[0][1]


def test_sdk_disabled_and_empty_variables():
    s, _ = settings({"OTEL_SDK_DISABLED": "True", "OTEL_EXPORTER_OTLP_TIMEOUT": ""})
    assert s.sdk_disabled is True
    assert s.origins["timeout"] == "default"


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
