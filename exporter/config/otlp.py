"""What the OTLP output adds to the SDK's exporters: ``outputs.otlp`` and what the SDK lacks.

The SDK's OTLP exporters read their standard variables themselves
(``OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT``, ``HEADERS``, ``COMPRESSION``,
``CERTIFICATE``, ``CLIENT_KEY``, ``CLIENT_CERTIFICATE``, ``INSECURE`` and
``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE``); a key set in
``outputs.otlp`` is passed to them explicitly and wins, as the spec orders it.
This module reads only what the exporters do not:

* the protocol (``OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL``): which exporter to build;
* the interval (``OTEL_METRIC_EXPORT_INTERVAL``): the SDK's periodic reader reads it,
  and the daemon runs its own export loop instead;
* the timeout (``OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT``): the spec says milliseconds,
  the Python SDK reads seconds (open-telemetry/opentelemetry-python#4044), so a
  spec-following ``10000`` would wait almost three hours; it is passed in seconds;
* ``OTEL_SDK_DISABLED``: checked by the SDK's ``MeterProvider``, which is not used;
* the compression default: gzip unless configured or set in the environment (the
  SDK's default is none; a node's batch shrinks about tenfold).

Pure: no SDK import, no I/O.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from exporter.config.fields import MIN_INTERVAL

if TYPE_CHECKING:
    from exporter.config.outputs import OtlpOutputConfig

PREFIX = "OTEL_EXPORTER_OTLP_"
SIGNAL_PREFIX = "OTEL_EXPORTER_OTLP_METRICS_"
PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_PROTOCOL = "http/protobuf"
METRICS_PATH = "v1/metrics"
DEFAULT_TIMEOUT = 10.0
# The spec's default interval is 60 s; half that keeps OTLP as fresh as a typical scrape.
DEFAULT_INTERVAL = 30.0
DEFAULT_COMPRESSION = "gzip"
# "No limit" for a timeout of 0, as the spec allows: the largest 32-bit millisecond count.
NO_LIMIT_SECONDS = (2**31 - 1) / 1000.0
INTERVAL_VAR = "OTEL_METRIC_EXPORT_INTERVAL"
# The settings the SDK reads from the environment when the config leaves them unset,
# and the variables it reads for each, first match wins.
SDK_READS: dict[str, tuple[str, ...]] = {
    key: (SIGNAL_PREFIX + name, PREFIX + name)
    for key, name in (
        ("endpoint", "ENDPOINT"),
        ("headers", "HEADERS"),
        ("compression", "COMPRESSION"),
        ("insecure", "INSECURE"),
        ("certificate_file", "CERTIFICATE"),
        ("client_certificate_file", "CLIENT_CERTIFICATE"),
        ("client_key_file", "CLIENT_KEY"),
    )
}
SDK_READS["temporality"] = (SIGNAL_PREFIX + "TEMPORALITY_PREFERENCE",)


@dataclass(frozen=True)
class OtlpSettings:
    """The OTLP output's settings. None (or empty) for a key: the SDK decides.

    ``endpoint`` is the full metrics URL for http/protobuf and the target as
    configured for gRPC. ``origins`` says, per setting, ``config``, ``env NAME``
    (the variable the SDK or this module reads) or ``default`` (for /status).
    """

    protocol: str
    interval: float
    timeout: float
    sdk_disabled: bool
    endpoint: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    compression: str | None = None
    insecure: bool | None = None
    certificate_file: str | None = None
    client_certificate_file: str | None = None
    client_key_file: str | None = None
    temporality: str | None = None
    origins: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Resolution:
    """Settings (None when there are problems), problems as (config key, message), warnings."""

    settings: OtlpSettings | None
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _set(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(value, variable) of the metrics-specific variable, else the generic one."""
    for var in (SIGNAL_PREFIX + name, PREFIX + name):
        value = env.get(var, "").strip()
        if value:  # the spec: an empty value is the same as unset
            return value, var
    return None


def _milliseconds(text: str) -> float:
    if not text.isdigit():
        raise ValueError(text)
    return int(text) / 1000.0


def http_endpoint(url: str) -> tuple[str, str]:
    """(metrics URL, "") or ("", problem) for a configured OTLP/HTTP endpoint.

    A base URL gets ``v1/metrics`` unless its path already ends so, so both
    ``http://c:4318`` and ``http://c:4318/v1/metrics`` work.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "", f"{url!r} is not an http:// or https:// URL"
    try:
        _ = parts.port
    except ValueError:
        return "", f"{url!r} has an invalid port"
    path = parts.path
    if not path.rstrip("/").endswith("/" + METRICS_PATH):
        path = path.rstrip("/") + "/" + METRICS_PATH
    return parts._replace(path=path, fragment="").geturl(), ""


def _grpc_target(url: str) -> str:
    """A problem with a configured gRPC target, or ""."""
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return f"{url!r} is not host:port or an http:// or https:// URL"
        return ""
    if not url or "/" in url:
        return f"{url!r} is not host:port or an http:// or https:// URL"
    return ""


class _Resolver:
    """One resolution: collects origins, problems and warnings."""

    def __init__(self, config: OtlpOutputConfig, env: Mapping[str, str]) -> None:
        self.config = config
        self.env = env
        self.origins: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []
        self.warnings: list[str] = []

    def origin(self, key: str, configured: bool, variables: tuple[str, ...]) -> None:
        found = next((var for var in variables if self.env.get(var, "").strip()), None)
        if configured:
            self.origins[key] = "config"
        elif found is not None:
            self.origins[key] = f"env {found}"
        else:
            self.origins[key] = "default"

    def protocol(self) -> str:
        if self.config.protocol is not None:
            self.origins["protocol"] = "config"
            return self.config.protocol
        found = _set(self.env, "PROTOCOL")
        if found is not None:
            value, var = found[0].lower(), found[1]
            if value in PROTOCOLS:
                self.origins["protocol"] = f"env {var}"
                return value
            if value == "http/json":
                self.problems.append(("protocol", f"env {var}: http/json is not supported"))
            else:
                self.warnings.append(f"{var}={found[0]!r} is not grpc or http/protobuf; ignored")
        self.origins["protocol"] = "default"
        return DEFAULT_PROTOCOL

    def _seconds(
        self,
        key: str,
        configured: float | None,
        found: tuple[str, str] | None,
        default: float,
        *,
        minimum: float = 0.0,
        expected: str,
    ) -> float:
        """The configured seconds, else ``found`` (value, variable) in ms, else ``default``."""
        if configured is not None:
            self.origins[key] = "config"
            return configured
        if found is not None:
            text, var = found
            try:
                seconds = _milliseconds(text)
                if seconds < minimum:
                    raise ValueError(text)
            except ValueError:
                self.warnings.append(f"{var}={text!r} is not {expected}; ignored")
            else:
                self.origins[key] = f"env {var}"
                return seconds
        self.origins[key] = "default"
        return default

    def timeout(self) -> float:
        found = _set(self.env, "TIMEOUT")
        seconds = self._seconds(
            "timeout",
            self.config.timeout,
            found,
            DEFAULT_TIMEOUT,
            expected="a whole number of milliseconds",
        )
        # The spec's 0 is no limit; a configured timeout is positive (its check says so).
        return NO_LIMIT_SECONDS if seconds == 0 else seconds

    def interval(self) -> float:
        raw = self.env.get(INTERVAL_VAR, "").strip()
        return self._seconds(
            "interval",
            self.config.interval,
            (raw, INTERVAL_VAR) if raw else None,
            DEFAULT_INTERVAL,
            minimum=MIN_INTERVAL,
            expected="milliseconds >= 100",
        )

    def endpoint(self, protocol: str) -> str | None:
        configured = self.config.endpoint
        if not configured:
            return None
        if protocol == "http/protobuf":
            url, problem = http_endpoint(configured)
            if problem:
                self.problems.append(("endpoint", problem))
            return url
        problem = _grpc_target(configured)
        if problem:
            self.problems.append(("endpoint", problem))
        elif configured.startswith("https://") and self.config.insecure:
            self.problems.append(("insecure", "true contradicts the https:// endpoint"))
        return configured

    def resolve(self) -> Resolution:
        config = self.config
        protocol = self.protocol()
        endpoint = self.endpoint(protocol)
        timeout = self.timeout()
        interval = self.interval()
        configured = {
            "endpoint": bool(config.endpoint),
            "headers": bool(config.headers),
            "compression": config.compression is not None,
            "insecure": config.insecure is not None,
            "certificate_file": bool(config.certificate_file),
            "client_certificate_file": bool(config.client_certificate_file),
            "client_key_file": bool(config.client_key_file),
            "temporality": config.temporality is not None,
        }
        for key, variables in SDK_READS.items():
            self.origin(key, configured[key], variables)
        compression: str | None = config.compression
        if compression is None and _set(self.env, "COMPRESSION") is None:
            compression = DEFAULT_COMPRESSION
        if bool(config.client_certificate_file) != bool(config.client_key_file):
            self.problems.append(
                ("client_key_file", "client_certificate_file and client_key_file come together")
            )
        disabled = self.env.get("OTEL_SDK_DISABLED", "").strip()
        if disabled and disabled.lower() not in ("true", "false"):
            self.warnings.append(f"OTEL_SDK_DISABLED={disabled!r} is not true or false; ignored")
        if self.problems:
            return Resolution(None, self.problems, self.warnings)
        settings = OtlpSettings(
            protocol=protocol,
            interval=interval,
            timeout=timeout,
            sdk_disabled=disabled.lower() == "true",
            endpoint=endpoint,
            headers={key.lower(): value for key, value in config.headers.items()},
            compression=compression,
            insecure=config.insecure,
            certificate_file=config.certificate_file or None,
            client_certificate_file=config.client_certificate_file or None,
            client_key_file=config.client_key_file or None,
            temporality=config.temporality,
            origins=dict(self.origins),
        )
        return Resolution(settings, [], self.warnings)


def environment_ca(env: Mapping[str, str]) -> str | None:
    """The CA file the environment names for the collector, if any.

    Only for building gRPC credentials when the config names a client
    certificate: the SDK then takes the credentials as given and reads no CA.
    """
    found = _set(env, "CERTIFICATE")
    return found[0] if found is not None else None


def sdk_missing() -> bool:
    """True when the OpenTelemetry SDK and OTLP exporters (the ``otlp`` extra) are absent."""
    for module in (
        "opentelemetry.sdk.metrics",
        "opentelemetry.exporter.otlp.proto.grpc",
        "opentelemetry.exporter.otlp.proto.http",
    ):
        try:
            if importlib.util.find_spec(module) is None:
                return True
        except ModuleNotFoundError:
            return True
    return False


def resolve(config: OtlpOutputConfig, env: Mapping[str, str]) -> Resolution:
    """``outputs.otlp`` plus what the SDK does not read, from ``env``."""
    return _Resolver(config, env).resolve()


def enabled_problems(config: OtlpOutputConfig, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Why an enabled OTLP output is unusable: (key under ``outputs.otlp``, problem) pairs.

    Its keys, and the protocol variable in ``env``: the environment load_config was
    given, never the process's own. The other OTEL_* variables are the SDK's to read
    when the output starts.
    """
    out = []
    if sdk_missing():
        out.append(("enabled", "needs the accel-exporter 'otlp' extra (docs/deploy.md)"))
    return out + resolve(config, env).problems
