"""The whole configuration: the top-level sections, composed (and the two-key ``log``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from exporter.config.health import HealthConfig
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.outputs import OutputsConfig
from exporter.config.sources import SourcesConfig
from exporter.config.web import WebConfig
from exporter.config.workload import WorkloadConfig


@dataclass(frozen=True)
class LogConfig:
    """Log level and format (auto: console on a TTY, JSON otherwise)."""

    HELP: ClassVar[dict[str, str]] = {
        "level": "least severe level logged",
        "format": "auto: console on a TTY, JSON otherwise",
    }

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration."""

    # Old names still read, with a "renamed" warning: old key -> new key.
    ALIASES: ClassVar[dict[str, str]] = {"enrich": "workload"}
    HELP: ClassVar[dict[str, str]] = {
        "web": "the HTTP server: /metrics, /status, /healthz, /readyz",
        "log": "log level and format",
        "workload": "which pod, container or Slurm job uses each device",
        "kubernetes": "the API server and credentials of pod labels, DRA and the health writer",
        "health": "the health verdict: event window, action overrides",
    }

    web: WebConfig = field(default_factory=WebConfig)
    log: LogConfig = field(default_factory=LogConfig)
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
