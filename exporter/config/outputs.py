"""The ``outputs`` section: what /metrics carries, the OTLP push, the health writers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from exporter.config.fields import Duration, FilePath, Secret, setting, timing_problems
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

    profile: Literal["minimal", "default", "full"] = setting(
        "default", "minimal, default or full (docs/profiles.md)"
    )
    include: list[str] = setting(
        factory=list, help="families or globs added to the profile, written in full"
    )
    exclude: list[str] = setting(factory=list, help="families or globs left out")

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

    compat: list[CompatName] = setting(
        factory=list,
        help="peers' series to serve too: dcgm, dcgm@4.8|4.9|4.10, amd (docs/migrating.md)",
    )
    workload_labels: bool = setting(
        False, "pod, namespace, container, job_id on attributed device series"
    )
    cluster_name: str = setting("", "the cluster_name label of the amd compat series")
    # peer -> its exporter's own field list file (dcgm: a collectors CSV; amd: config.json).
    compat_fields: dict[str, FilePath] = setting(
        factory=dict, help="peer -> its field file: dcgm collectors CSV, amd config.json"
    )

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

    enabled: bool = setting(False, "push metrics over OTLP")
    # Base URL (http/protobuf: /v1/metrics is appended unless already there) or gRPC target.
    endpoint: str = setting("", "collector URL (http/protobuf) or gRPC target")
    protocol: Literal["grpc", "http/protobuf"] | None = setting(
        None, "OTLP transport (unset: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)"
    )
    interval: Duration | None = setting(
        None, "time between two pushes (unset: OTEL_METRIC_EXPORT_INTERVAL, else 30s)"
    )
    timeout: Duration | None = setting(
        None, "deadline of one push (unset: OTEL_*_TIMEOUT in ms, else 10s)"
    )
    headers: dict[str, Secret] = setting(factory=dict, help="headers sent with every push (tokens)")
    compression: Literal["none", "gzip"] | None = setting(
        None, "push compression (unset: OTEL_*_COMPRESSION, else gzip)"
    )
    # gRPC only, and only for an endpoint without http:// or https://.
    insecure: bool | None = setting(None, "gRPC without TLS (endpoints without a scheme only)")
    certificate_file: FilePath = setting("", "CA bundle that signs the collector's certificate")
    client_certificate_file: FilePath = setting("", "client certificate for mTLS to the collector")
    client_key_file: FilePath = setting("", "key of client_certificate_file")
    temporality: Literal["cumulative", "delta"] | None = setting(
        None, "counter temporality (unset: OTEL_* preference, else cumulative)"
    )
    # Resource attributes that win over detection and OTEL_RESOURCE_ATTRIBUTES.
    resource_attributes: dict[str, str] = setting(
        factory=dict, help="resource attributes that win over detection"
    )

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

    # The API server and credentials moved to the kubernetes section.
    RENAMED: ClassVar[dict[str, str]] = MOVED

    enabled: bool = setting(
        False, "write DeviceTaintRules and a Node condition for this node's devices"
    )
    interval: Duration = setting(30.0, "time between two reconciliations")
    timeout: Duration = setting(10.0, "deadline of one API request")
    taint_rules: bool = setting(True, "a DeviceTaintRule per failed device (DRA clusters)")
    # Rules are created with effect None (they only report what they would do); this
    # effect is set one reconciliation later. None keeps them report-only.
    taint_effect: Literal["None", "NoSchedule", "NoExecute"] = setting(
        "None", "effect after the first, effect-less rule: None, NoSchedule, NoExecute"
    )
    taint_degraded: bool = setting(False, "taint degraded devices too, not only failed ones")
    taint_key: str = setting("accel-exporter.io/unhealthy", "the taint's key")
    clear_after: Duration = setting(
        300.0, "a device healthy this long loses its taint (hysteresis)"
    )
    node_condition: bool = setting(
        True, "the Node condition AcceleratorHealthy (device-plugin clusters)"
    )
    # An unchanged condition is patched only this often (Node Problem Detector's
    # 5 minutes): every patch is an update event for every Node watcher.
    heartbeat: Duration = setting(
        300.0, "the unchanged Node condition is written again this often (at most 5m)"
    )

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

    prometheus: PrometheusOutputConfig = setting(
        factory=PrometheusOutputConfig,
        help="what /metrics carries: profile, include, exclude, compat series",
    )
    otlp: OtlpOutputConfig = setting(
        factory=OtlpOutputConfig, help="OTLP metrics push (off by default)"
    )
    kubernetes: KubernetesOutputConfig = setting(
        factory=KubernetesOutputConfig,
        help="device health to Kubernetes: DeviceTaintRules, Node condition (off)",
    )
    nvsentinel: NvsentinelOutputConfig = setting(
        factory=NvsentinelOutputConfig,
        help="device health as NVSentinel HealthEvents on its socket (off)",
    )
