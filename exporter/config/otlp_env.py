"""The OTLP output's effective settings: ``outputs.otlp``, then OTEL_* variables, then defaults.

Precedence for every setting, as the OpenTelemetry exporter spec orders it (our
config file, ``ACCEL_EXPORTER_*`` variables and flags are the "programmatic"
layer): ``outputs.otlp.<key>`` > ``OTEL_EXPORTER_OTLP_METRICS_<KEY>`` >
``OTEL_EXPORTER_OTLP_<KEY>`` > default. Headers merge key by key in that order.

Value parsing follows the spec too: an empty variable counts as unset; a
number, boolean or enum that cannot be parsed is ignored with a warning; a
timeout of 0 means no limit. What cannot be ignored safely (an endpoint that is
not a URL, a protocol we do not speak, an unreadable certificate) is a problem
that names the variable, reported with the other configuration errors.

Pure: no SDK import, no I/O beyond checking that certificate files are readable.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from exporter.config.schema import OtlpOutputConfig

T = TypeVar("T")

PREFIX = "OTEL_EXPORTER_OTLP_"
SIGNAL_PREFIX = "OTEL_EXPORTER_OTLP_METRICS_"
DEFAULT_PROTOCOL = "http/protobuf"
DEFAULT_ENDPOINTS = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
METRICS_PATH = "v1/metrics"
DEFAULT_TIMEOUT = 10.0
# The spec's default interval is 60 s; half that keeps OTLP as fresh as a typical scrape.
DEFAULT_INTERVAL = 30.0
DEFAULT_COMPRESSION = "gzip"
# "No limit" for a timeout of 0, as the spec allows: the largest 32-bit millisecond count.
NO_LIMIT_SECONDS = (2**31 - 1) / 1000.0
MIN_INTERVAL_SECONDS = 0.1
TEMPORALITIES = ("cumulative", "delta", "lowmemory")


@dataclass(frozen=True)
class OtlpSettings:
    """Everything the OTLP output needs, resolved and validated.

    ``endpoint`` is the full URL for http/protobuf and the ``host:port`` target
    for gRPC. ``origins`` says where each setting came from (for /status).
    """

    protocol: str
    endpoint: str
    secure: bool
    headers: Mapping[str, str]
    timeout: float
    compression: str
    certificate_file: str
    client_certificate_file: str
    client_key_file: str
    temporality: str
    interval: float
    sdk_disabled: bool
    origins: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Resolution:
    """Settings (None when there are problems), problems as (config key, message), warnings."""

    settings: OtlpSettings | None
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class _Env:
    """Reads OTEL_* variables with the spec's rules and remembers warnings."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.warnings: list[str] = []

    def raw(self, name: str) -> tuple[str, str] | None:
        """(value, variable) of the metrics-specific variable, else the generic one."""
        for var in (SIGNAL_PREFIX + name, PREFIX + name):
            value = self.env.get(var, "").strip()
            if value:  # the spec: an empty value is the same as unset
                return value, var
        return None

    def parsed(self, name: str, parse: Callable[[str], T], what: str) -> tuple[T, str] | None:
        """A parsed variable, or None (unset, or unparsable: then ignored with a warning)."""
        found = self.raw(name)
        if found is None:
            return None
        value, var = found
        try:
            return parse(value), var
        except ValueError:
            self.warnings.append(f"{var}={value!r} is not {what}; ignored")
            return None

    def boolean(self, var: str) -> bool:
        """The spec's boolean: only "true" (any case) is true; odd values warn."""
        value = self.env.get(var, "").strip()
        if value and value.lower() not in ("true", "false"):
            self.warnings.append(f"{var}={value!r} is not true or false; read as false")
        return value.lower() == "true"


def _milliseconds(text: str) -> float:
    if not text.isdigit():
        raise ValueError(text)
    return int(text) / 1000.0


def _timeout(text: str) -> float:
    seconds = _milliseconds(text)
    return NO_LIMIT_SECONDS if seconds == 0 else seconds


def _interval(text: str) -> float:
    seconds = _milliseconds(text)
    if seconds < MIN_INTERVAL_SECONDS:
        raise ValueError(text)
    return seconds


def _enum(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError(text)
        return value

    return parse


def parse_headers(text: str) -> tuple[dict[str, str], list[str]]:
    """``k1=v1,k2=v2`` (W3C baggage form, values percent-encoded) -> headers, bad items."""
    headers: dict[str, str] = {}
    bad: list[str] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            bad.append(item.strip())
            continue
        headers[key.lower()] = unquote(value.strip())
    return headers, bad


# How an OTLP/HTTP endpoint becomes the metrics URL.
AS_IS = "as_is"  # OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: used unchanged (root path if none)
BASE = "base"  # OTEL_EXPORTER_OTLP_ENDPOINT: v1/metrics appended, always
SMART = "smart"  # outputs.otlp.endpoint: v1/metrics appended unless the path already ends so


def _http_endpoint(url: str, mode: str) -> tuple[str, str]:
    """(full URL, "") or ("", problem) for OTLP/HTTP."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "", f"{url!r} is not an http:// or https:// URL"
    try:
        _ = parts.port
    except ValueError:
        return "", f"{url!r} has an invalid port"
    path = parts.path
    if mode == BASE or (mode == SMART and not path.rstrip("/").endswith("/" + METRICS_PATH)):
        path = path.rstrip("/") + "/" + METRICS_PATH
    elif not path:
        path = "/"  # the spec: a URL without a path goes to the root path
    return parts._replace(path=path, fragment="").geturl(), ""


def _grpc_target(url: str) -> tuple[str, bool | None, str]:
    """(host:port, secure from the scheme or None, problem) for OTLP/gRPC."""
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return "", None, f"{url!r} is not host:port or an http:// or https:// URL"
        return parts.netloc, parts.scheme == "https", ""
    if not url or "/" in url:
        return "", None, f"{url!r} is not host:port or an http:// or https:// URL"
    return url, None, ""


def _readable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.R_OK)


class _Resolver:
    """One resolution: walks every setting and collects origins, problems and warnings."""

    def __init__(self, config: OtlpOutputConfig, env: Mapping[str, str]) -> None:
        self.config = config
        self.env = _Env(env)
        self.origins: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []

    def pick(
        self,
        key: str,
        explicit: T | None,
        from_env: Callable[[], tuple[T, str] | None],
        default: T,
    ) -> T:
        """Config value, else the environment's, else the default; records the origin.

        The environment is only read when the config leaves the key unset, so a
        variable that config overrides never warns.
        """
        if explicit is not None:
            self.origins[key] = "config"
            return explicit
        found = from_env()
        if found is not None:
            self.origins[key] = f"env {found[1]}"
            return found[0]
        self.origins[key] = "default"
        return default

    def env_var(
        self, name: str, parse: Callable[[str], T], what: str
    ) -> Callable[[], tuple[T, str] | None]:
        """A deferred read of OTEL_EXPORTER_OTLP_[METRICS_]<name>."""
        return lambda: self.env.parsed(name, parse, what)

    def protocol(self) -> str:
        def from_env() -> tuple[str, str] | None:
            found = self.env.raw("PROTOCOL")
            if found is not None and found[0].lower() == "http/json":
                self.problems.append(
                    ("protocol", f"env {found[1]}: http/json is not supported; use http/protobuf")
                )
                return None
            return self.env.parsed(
                "PROTOCOL", _enum(("grpc", "http/protobuf")), "grpc or http/protobuf"
            )

        return self.pick("protocol", self.config.protocol, from_env, DEFAULT_PROTOCOL)

    def endpoint(self, protocol: str) -> tuple[str, bool]:
        """Target and whether TLS is on."""
        config = self.config
        specific = self.env.env.get(SIGNAL_PREFIX + "ENDPOINT", "").strip()
        generic = self.env.env.get(PREFIX + "ENDPOINT", "").strip()
        if config.endpoint:
            raw, origin, mode = config.endpoint, "config", SMART
        elif specific:
            raw, origin, mode = specific, f"env {SIGNAL_PREFIX}ENDPOINT", AS_IS
        elif generic:
            raw, origin, mode = generic, f"env {PREFIX}ENDPOINT", BASE
        else:
            raw, origin, mode = DEFAULT_ENDPOINTS[protocol], "default", BASE
        self.origins["endpoint"] = origin
        where = "" if origin == "config" else f"{origin}: "
        if protocol == "http/protobuf":
            url, problem = _http_endpoint(raw, mode)
            if problem:
                self.problems.append(("endpoint", where + problem))
            return url, url.startswith("https://")
        target, scheme_secure, problem = _grpc_target(raw)
        if problem:
            self.problems.append(("endpoint", where + problem))
        insecure_env = self.env.raw("INSECURE")
        if config.insecure is not None:
            insecure = config.insecure
            if scheme_secure is True and insecure and origin == "config":
                self.problems.append(("insecure", "true contradicts the https:// endpoint"))
        elif insecure_env is not None:
            insecure = self.env.boolean(insecure_env[1])
        else:
            insecure = False
        secure = scheme_secure if scheme_secure is not None else not insecure
        return target, secure

    def file(self, key: str, explicit: str, name: str) -> str:
        path = self.pick(key, explicit or None, lambda: self.env.raw(name), "")
        origin = self.origins[key]
        # Config paths were checked by the loader (FilePath); the environment's are checked here.
        if origin.startswith("env ") and not _readable(path):
            self.problems.append((key, f"{origin}: cannot read file {path!r}"))
        return path

    def _interval_env(self) -> tuple[float, str] | None:
        var = "OTEL_METRIC_EXPORT_INTERVAL"
        raw = self.env.env.get(var, "").strip()
        if not raw:
            return None
        try:
            return _interval(raw), var
        except ValueError:
            self.env.warnings.append(f"{var}={raw!r} is not milliseconds >= 100; ignored")
            return None

    def headers(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        found = self.env.raw("HEADERS")
        if found is not None:
            merged, bad = parse_headers(found[0])
            for item in bad:
                self.env.warnings.append(f"{found[1]}: ignored malformed header {item!r}")
        merged.update({key.lower(): value for key, value in self.config.headers.items()})
        return merged

    def resolve(self) -> Resolution:
        config = self.config
        env = self.env
        protocol = self.protocol()
        endpoint, secure = self.endpoint(protocol)
        timeout = self.pick(
            "timeout",
            config.timeout,
            self.env_var("TIMEOUT", _timeout, "a whole number of milliseconds"),
            DEFAULT_TIMEOUT,
        )
        compression = self.pick(
            "compression",
            config.compression,
            self.env_var("COMPRESSION", _enum(("gzip", "none")), "gzip or none"),
            DEFAULT_COMPRESSION,
        )
        temporality = self.pick(
            "temporality",
            config.temporality,
            self.env_var(
                "TEMPORALITY_PREFERENCE", _enum(TEMPORALITIES), "cumulative, delta or lowmemory"
            ),
            "cumulative",
        )
        interval = self.pick("interval", config.interval, self._interval_env, DEFAULT_INTERVAL)
        ca = self.file("certificate_file", config.certificate_file, "CERTIFICATE")
        cert = self.file(
            "client_certificate_file", config.client_certificate_file, "CLIENT_CERTIFICATE"
        )
        key = self.file("client_key_file", config.client_key_file, "CLIENT_KEY")
        if bool(cert) != bool(key):
            self.problems.append(
                ("client_key_file", "client_certificate_file and client_key_file come together")
            )
        headers = self.headers()
        sdk_disabled = env.boolean("OTEL_SDK_DISABLED")
        if self.problems:
            return Resolution(None, self.problems, env.warnings)
        settings = OtlpSettings(
            protocol=protocol,
            endpoint=endpoint,
            secure=secure,
            headers=headers,
            timeout=timeout,
            compression=compression,
            certificate_file=ca,
            client_certificate_file=cert,
            client_key_file=key,
            temporality=temporality,
            interval=interval,
            sdk_disabled=sdk_disabled,
            origins=dict(self.origins),
        )
        return Resolution(settings, [], env.warnings)


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
    """Merge ``outputs.otlp`` with the OTEL_* variables in ``env``."""
    return _Resolver(config, env).resolve()
