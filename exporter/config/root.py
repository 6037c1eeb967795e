"""The whole configuration: the top-level sections, composed (and the two-key ``log``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from exporter.config.fields import setting
from exporter.config.health import HealthConfig
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.outputs import OutputsConfig
from exporter.config.sources import SourcesConfig
from exporter.config.web import WebConfig
from exporter.config.workload import WorkloadConfig


@dataclass(frozen=True)
class LogConfig:
    """Log level and format (auto: console on a TTY, JSON otherwise)."""

    level: Literal["debug", "info", "warning", "error"] = setting(
        "info", "least severe level logged"
    )
    format: Literal["auto", "json", "console"] = setting(
        "auto", "auto: console on a TTY, JSON otherwise"
    )


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration."""

    # Old names still read, with a "renamed" warning: old key -> new key.
    ALIASES: ClassVar[dict[str, str]] = {"enrich": "workload"}

    web: WebConfig = setting(
        factory=WebConfig, help="the HTTP server: /metrics, /status, /healthz, /readyz"
    )
    log: LogConfig = setting(factory=LogConfig, help="log level and format")
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    workload: WorkloadConfig = setting(
        factory=WorkloadConfig, help="which pod, container or Slurm job uses each device"
    )
    kubernetes: KubernetesConfig = setting(
        factory=KubernetesConfig,
        help="the API server and credentials of pod labels, DRA and the health writer",
    )
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    health: HealthConfig = setting(
        factory=HealthConfig, help="the health verdict: event window, action overrides"
    )
