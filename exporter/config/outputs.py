"""The ``outputs`` section: what /metrics carries, the OTLP push, the health writers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from exporter.config.fields import Duration, FilePath, Secret, timing_problems
from exporter.config.kubernetes import LABEL_KEY, MOVED
from exporter.config.nvsentinel import NvsentinelOutputConfig

CompatName = Literal["dcgm", "dcgm@4.8", "dcgm@4.9", "dcgm@4.10", "amd"]


@dataclass(frozen=True)
class ProfileConfig:
    """Which families an output carries: a profile, then families added or removed.

    ``minimal`` (alerts and capacity dashboards), ``default`` (every family, one row
    per device for links and engines, per-link NVLink errors only for links that
    counted one), ``full`` (every link and engine). ``include`` and ``exclude`` name
    families (with or without ``_total``) or globs (``accel_nvlink_*``); an included
    family is written in full. See docs/profiles.md.
    """

    HELP: ClassVar[dict[str, str]] = {
        "profile": "minimal, default or full (docs/profiles.md)",
        "include": "families or globs added to the profile, written in full",
        "exclude": "families or globs left out",
    }

    profile: Literal["minimal", "default", "full"] = "default"
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)

    def check(self) -> list[tuple[str, str]]:
        """Every pattern names a catalog family (the near miss named when it does not)."""
        from exporter.catalog.profiles import pattern_problem

        out = []
        for key, patterns in (("include", self.include), ("exclude", self.exclude)):
            for i, pattern in enumerate(patterns):
                problem = pattern_problem(pattern)
                if problem is not None:
                    out.append((f"{key}.{i}", problem))
        return out


def _field_file_problem(peer: str, path: str) -> str:
    """Why a peer's field file cannot be used as it is ("" when it can)."""
    if peer == "dcgm":
        from exporter.outputs.compat.dcgm_csv import CsvError, load

        try:
            load(path)
        except (OSError, CsvError) as exc:
            return str(exc)
        return ""
    from exporter.outputs.compat.amd_fields import FieldFileError, read

    try:
        read(path)
    except FieldFileError as exc:
        return str(exc)
    return ""


@dataclass(frozen=True)
class PrometheusOutputConfig(ProfileConfig):
    """What /metrics carries: our families by profile, and other exporters' series.

    The listener itself is configured in ``web``; compat series are off by default.
    """

    HELP: ClassVar[dict[str, str]] = {
        **ProfileConfig.HELP,
        "compat": "peers' series to serve too: dcgm, dcgm@4.8|4.9|4.10, amd (docs/migrating.md)",
        "workload_labels": "pod, namespace, container, job_id on attributed device series",
        "cluster_name": "the cluster_name label of the amd compat series",
        "compat_fields": "peer -> its field file: dcgm collectors CSV, amd config.json",
    }

    compat: list[CompatName] = field(default_factory=list)
    workload_labels: bool = False
    cluster_name: str = ""
    # peer -> its exporter's own field list file (dcgm: a collectors CSV; amd: config.json).
    compat_fields: dict[str, FilePath] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        """The profile's patterns, no series name served twice in two units, usable files."""
        # Imported here: the readers are needed only when compat is configured.
        from exporter.outputs.compat.dcgm_table import unit_conflicts

        out = super().check()
        out += [("compat", problem) for problem in unit_conflicts(self.compat)]
        for peer, path in self.compat_fields.items():
            if peer not in ("dcgm", "amd"):
                out.append((f"compat_fields.{peer}", "not a compat peer: dcgm, amd"))
            elif path:
                problem = _field_file_problem(peer, path)
                if problem:
                    out.append((f"compat_fields.{peer}", problem))
        return out


@dataclass(frozen=True)
class OtlpOutputConfig(ProfileConfig):
    """OTLP metrics push (off by default).

    A key left unset here is the SDK exporter's: it reads the standard
    ``OTEL_EXPORTER_OTLP_METRICS_*`` and ``OTEL_EXPORTER_OTLP_*`` variables, then its
    default (see docs/otlp.md): explicit configuration wins, as the OpenTelemetry spec asks.
    """

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "push metrics over OTLP",
        "endpoint": "collector URL (http/protobuf) or gRPC target",
        "protocol": "OTLP transport (unset: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
        "interval": "time between two pushes (unset: OTEL_METRIC_EXPORT_INTERVAL, else 30s)",
        "timeout": "deadline of one push (unset: OTEL_*_TIMEOUT in ms, else 10s)",
        "headers": "headers sent with every push (tokens)",
        "compression": "push compression (unset: OTEL_*_COMPRESSION, else gzip)",
        "insecure": "gRPC without TLS (endpoints without a scheme only)",
        "certificate_file": "CA bundle that signs the collector's certificate",
        "client_certificate_file": "client certificate for mTLS to the collector",
        "client_key_file": "key of client_certificate_file",
        "temporality": "counter temporality (unset: OTEL_* preference, else cumulative)",
        "resource_attributes": "resource attributes that win over detection",
        **ProfileConfig.HELP,
    }

    enabled: bool = False
    # Base URL (http/protobuf: /v1/metrics is appended unless already there) or gRPC target.
    endpoint: str = ""
    protocol: Literal["grpc", "http/protobuf"] | None = None
    interval: Duration | None = None
    timeout: Duration | None = None
    headers: dict[str, Secret] = field(default_factory=dict)
    compression: Literal["none", "gzip"] | None = None
    # gRPC only, and only for an endpoint without http:// or https://.
    insecure: bool | None = None
    certificate_file: FilePath = ""
    client_certificate_file: FilePath = ""
    client_key_file: FilePath = ""
    temporality: Literal["cumulative", "delta"] | None = None
    # Resource attributes that win over detection and OTEL_RESOURCE_ATTRIBUTES.
    resource_attributes: dict[str, str] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        """Positive timings (the OTEL_* merge is checked by load_config, with its env)."""
        out = super().check() + timing_problems(self.interval, self.timeout)
        return out


# The longest a Node condition may go unwritten: watchers take an older heartbeat for
# a writer that is gone.
MAX_HEARTBEAT_SECONDS = 300.0


@dataclass(frozen=True)
class KubernetesOutputConfig:
    """The health verdict written to Kubernetes (docs/kubernetes-health.md); off by default.

    The API server, node name and credentials are the ``kubernetes`` section's.
    """

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "write DeviceTaintRules and a Node condition for this node's devices",
        "interval": "time between two reconciliations",
        "timeout": "deadline of one API request",
        "taint_rules": "a DeviceTaintRule per failed device (DRA clusters)",
        "taint_effect": "effect after the first, effect-less rule: None, NoSchedule, NoExecute",
        "taint_degraded": "taint degraded devices too, not only failed ones",
        "taint_key": "the taint's key",
        "clear_after": "a device healthy this long loses its taint (hysteresis)",
        "node_condition": "the Node condition AcceleratorHealthy (device-plugin clusters)",
        "heartbeat": "the unchanged Node condition is written again this often (at most 5m)",
    }
    # The API server and credentials moved to the kubernetes section.
    RENAMED: ClassVar[dict[str, str]] = MOVED

    enabled: bool = False
    interval: Duration = 30.0
    timeout: Duration = 10.0
    taint_rules: bool = True
    # Rules are created with effect None (they only report what they would do); this
    # effect is set one reconciliation later. None keeps them report-only.
    taint_effect: Literal["None", "NoSchedule", "NoExecute"] = "None"
    taint_degraded: bool = False
    taint_key: str = "accel-exporter.io/unhealthy"
    clear_after: Duration = 300.0
    node_condition: bool = True
    # An unchanged condition is patched only this often (Node Problem Detector's
    # 5 minutes): every patch is an update event for every Node watcher.
    heartbeat: Duration = 300.0

    def check(self) -> list[tuple[str, str]]:
        """Positive timings, a heartbeat of interval..5m; a taint key that is a label name."""
        import re

        out = timing_problems(self.interval, self.timeout)
        if not self.interval <= self.heartbeat <= MAX_HEARTBEAT_SECONDS:
            out.append(("heartbeat", "must be at least the interval and at most 5m"))
        if self.clear_after < 0:
            out.append(("clear_after", "must not be negative"))
        if not re.fullmatch(LABEL_KEY, self.taint_key):
            out.append(("taint_key", "must be a label name ([prefix/]name)"))
        return out


@dataclass(frozen=True)
class OutputsConfig:
    """Outputs: what /metrics carries, and the push outputs (Prometheus pull is always on)."""

    HELP: ClassVar[dict[str, str]] = {
        "prometheus": "what /metrics carries: profile, include, exclude, compat series",
        "otlp": "OTLP metrics push (off by default)",
        "kubernetes": "device health to Kubernetes: DeviceTaintRules, Node condition (off)",
        "nvsentinel": "device health as NVSentinel HealthEvents on its socket (off)",
    }

    prometheus: PrometheusOutputConfig = field(default_factory=PrometheusOutputConfig)
    otlp: OtlpOutputConfig = field(default_factory=OtlpOutputConfig)
    kubernetes: KubernetesOutputConfig = field(default_factory=KubernetesOutputConfig)
    nvsentinel: NvsentinelOutputConfig = field(default_factory=NvsentinelOutputConfig)
