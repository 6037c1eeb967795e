"""The sources that read the host itself: ``sources.host`` and ``sources.cuda_checkpoint``."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config.fields import Duration, Enabled, positive, setting
from exporter.config.source import SourceConfig


@dataclass(frozen=True)
class HostSourceConfig(SourceConfig):
    """Host CPU, memory and load from /proc."""

    interval: Duration = 5.0
    proc_path: str = setting("/proc", "where /proc is mounted (the host's, in a container)")


@dataclass(frozen=True)
class CudaCheckpointSourceConfig(SourceConfig):
    """CUDA checkpoint state of GPU processes (read-only; needs CUDA 12.8 / driver r570+)."""

    enabled: Enabled = False
    interval: Duration = 30.0
    proc_path: str = setting("/proc", "where /proc is mounted (the host's, in a container)")
    # Also look for processes that map libcuda (checkpointed ones leave the GPU process list).
    scan_maps: bool = setting(True, "also find processes that map libcuda (checkpointed ones)")
    # Time allowed for the worker to load libcuda and call cuInit.
    bootstrap_timeout: Duration = setting(
        30.0, "time for the worker to load libcuda and call cuInit"
    )

    def check(self) -> list[tuple[str, str]]:
        """A positive bootstrap deadline."""
        return super().check() + positive(self, "bootstrap_timeout")
