"""The sources that read the host itself: ``sources.host`` and ``sources.cuda_checkpoint``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from exporter.config.fields import Duration, Enabled, positive
from exporter.config.source import SourceConfig


@dataclass(frozen=True)
class HostSourceConfig(SourceConfig):
    """Host CPU, memory and load from /proc."""

    HELP: ClassVar[dict[str, str]] = {
        "proc_path": "where /proc is mounted (the host's, in a container)",
    }

    interval: Duration = 5.0
    proc_path: str = "/proc"


@dataclass(frozen=True)
class CudaCheckpointSourceConfig(SourceConfig):
    """CUDA checkpoint state of GPU processes (read-only; needs CUDA 12.8 / driver r570+)."""

    HELP: ClassVar[dict[str, str]] = {
        "proc_path": "where /proc is mounted (the host's, in a container)",
        "scan_maps": "also find processes that map libcuda (checkpointed ones)",
        "bootstrap_timeout": "time for the worker to load libcuda and call cuInit",
    }

    enabled: Enabled = False
    interval: Duration = 30.0
    proc_path: str = "/proc"
    # Also look for processes that map libcuda (checkpointed ones leave the GPU process list).
    scan_maps: bool = True
    # Time allowed for the worker to load libcuda and call cuInit.
    bootstrap_timeout: Duration = 30.0

    def check(self) -> list[tuple[str, str]]:
        """A positive bootstrap deadline."""
        return super().check() + positive(self, "bootstrap_timeout")
