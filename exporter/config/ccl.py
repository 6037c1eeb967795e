"""The NCCL/RCCL sources: ``sources.ccl_ras`` and ``sources.ccl_inspector``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from exporter.config.fields import Duration, Enabled, at_least, positive, setting
from exporter.config.source import SourceConfig

# A RAS follower queries this many times less often than the reporter by default.
FOLLOWER_FACTOR = 10


@dataclass(frozen=True)
class CclRasSourceConfig(SourceConfig):
    """NCCL/RCCL RAS service client (every NCCL process listens on port 28028)."""

    enabled: Enabled = "auto"
    addresses: list[str] = setting(
        factory=lambda: ["localhost:28028"], help="RAS service host:port of the NCCL/RCCL processes"
    )
    interval: Duration = 30.0
    timeout: Duration | None = 15.0
    format: Literal["auto", "json", "text"] = setting(
        "auto", "RAS reply format asked for (auto: JSON where supported)"
    )
    verbose: bool = setting(True, "ask for the verbose report (per-rank detail)")
    rank_series: Literal["local", "all", "none"] = setting(
        "local", "per-rank series: this node's ranks, all, or none"
    )
    stall_polls: int = setting(3, "polls without progress before a job counts as stalled")
    role: Literal["auto", "reporter", "follower"] = setting(
        "auto", "reporter queries every poll, a follower less often (auto: by rank 0)"
    )
    # Unset: ten times the interval.
    follower_interval: Duration | None = setting(
        None, "a follower's query interval (derived: ten intervals)"
    )
    max_response_bytes: int = setting(32 * 1024 * 1024, "largest RAS reply read")
    monitor: Enabled = setting("auto", "keep a RAS monitor connection for instant state changes")
    # This node's addresses, to tell local ranks and the reporter role; empty: read them
    # from the kernel (plus the host of every non-loopback address above).
    local_addresses: list[str] = setting(
        factory=list, help="this node's IP addresses (empty: read from the kernel)"
    )

    def check(self) -> list[tuple[str, str]]:
        """Sane addresses and counts."""
        import ipaddress

        from exporter.config.addresses import address_list_problems

        out = super().check() + address_list_problems(self.addresses, 28028, "RAS")
        for i, local in enumerate(self.local_addresses):
            try:
                ipaddress.ip_address(local.strip("[]"))
            except ValueError:
                out.append((f"local_addresses.{i}", f"{local!r} is not an IP address"))
        out += at_least(self, 1, "stall_polls")
        if self.follower_interval is not None and self.follower_interval < self.interval:
            out.append(("follower_interval", "must be at least interval"))
        out += at_least(self, 4096, "max_response_bytes")
        return out

    def resolved(self) -> CclRasSourceConfig:
        """Also fill ``follower_interval`` from the interval."""
        base = super().resolved()
        assert isinstance(base, CclRasSourceConfig)
        return dataclasses.replace(base, follower_interval=self.follower_seconds)

    @property
    def follower_seconds(self) -> float:
        """A follower's query interval: ``follower_interval``, else ten intervals."""
        if self.follower_interval is not None:
            return self.follower_interval
        return FOLLOWER_FACTOR * self.interval


@dataclass(frozen=True)
class CclInspectorSourceConfig(SourceConfig):
    """NCCL/RCCL Inspector profiler plugin output (one JSONL file per process)."""

    enabled: Enabled = "auto"
    dir: str = setting("/var/run/nccl-inspector", "directory of the Inspector plugin's JSONL files")
    interval: Duration = 15.0
    # Bus bandwidth above this is flagged as implausible (RCCL 2.28.3 reports 10x too high).
    link_peak_bytes_per_second: float = setting(
        1.0e12, "bus bandwidth above this is flagged implausible"
    )
    max_line_bytes: int = setting(1024 * 1024, "longest JSONL line read")
    # Per file and poll; a larger backlog is skipped (counted), keeping CPU per poll bounded.
    max_read_bytes: int = setting(
        8 * 1024 * 1024, "bytes read per file and poll (a larger backlog is skipped)"
    )
    max_files: int = setting(256, "files followed at once")
    # Communicators tracked at once; the least recently seen is forgotten beyond this.
    max_comms: int = setting(64, "communicators tracked at once")
    # {comm, collective, msg_size} label sets over all communicators (two histograms each).
    max_series: int = setting(512, "{comm, collective, msg_size} label sets at most")
    # Only files <hostname>-pid<pid>.log of these host names (a shared directory); empty: all.
    hostnames: list[str] = setting(factory=list, help="only files of these host names (empty: all)")

    def check(self) -> list[tuple[str, str]]:
        """Positive limits."""
        out = super().check()
        out += at_least(
            self, 1, "max_line_bytes", "max_read_bytes", "max_files", "max_comms", "max_series"
        )
        if self.max_read_bytes < self.max_line_bytes:
            out.append(("max_read_bytes", "must be at least max_line_bytes"))
        return out + positive(self, "link_peak_bytes_per_second")
