"""The ``sources.diag`` section: the directory diagnostic runs leave their results in."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config.fields import Duration, Enabled, at_least, setting
from exporter.config.source import SourceConfig

# Where the Slurm prolog/epilog and the Kubernetes pre-flight Job of docs/diagnostics.md
# write; a directory that does not exist is no result, never an error.
DEFAULT_PATH = "/var/lib/accel-exporter/diag"


@dataclass(frozen=True)
class DiagSourceConfig(SourceConfig):
    """Diagnostic results (dcgmi diag --json, AGFHC, RVS) read from a directory."""

    # auto: a node without the directory reports the source unavailable (not an error) and
    # looks again every minute; true: it reports the directory absent, polling as usual.
    enabled: Enabled = "auto"
    interval: Duration = 30.0
    path: str = setting(
        DEFAULT_PATH, "directory of result files (*.json); absent: no results, no error"
    )
    max_file_bytes: int = setting(4 * 1024 * 1024, "a larger file is refused (too_large), not read")
    max_files: int = setting(
        256, "newest files read; older ones beyond it are refused (too_many_files)"
    )

    def check(self) -> list[tuple[str, str]]:
        """A file limit of at least 1 KiB, at least one file, a path."""
        out = super().check() + at_least(self, 1024, "max_file_bytes", shown="1 KiB (1024)")
        out += at_least(self, 1, "max_files")
        if not self.path.strip():
            out.append(("path", "must not be empty"))
        return out
