"""Collective performance from the NCCL/RCCL Inspector profiler plugin's JSONL files.

The plugin writes one file per NCCL process, ``<dir>/<hostname>-pid<pid>.log``,
appending one compact JSON object per completed operation. This source follows
every such file by offset (never rereading a file), parses the new lines on a
thread of its own, and keeps cumulative, bounded statistics (see
``exporter.ccl.inspector``). A missing directory is the normal state of a node
with no profiled job: the poll succeeds with no files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from exporter import log
from exporter.ccl.inspector import InspectorAggregator
from exporter.ccl.tail import REFUSED, DirectoryTail, TailStats
from exporter.config.ccl import CclInspectorSourceConfig
from exporter.errors import SourceError
from exporter.family_names import (
    ACCEL_CCL_INSPECTOR_FILE_RESTARTS_TOTAL,
    ACCEL_CCL_INSPECTOR_FILES,
    ACCEL_CCL_INSPECTOR_FILES_REFUSED_TOTAL,
    ACCEL_CCL_INSPECTOR_SKIPPED_BYTES_TOTAL,
)
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source

FILE_NAME = r"(?P<host>.+)-pid(?P<pid>\d+)\.log"


def file_pattern(hostnames: Sequence[str]) -> re.Pattern[str]:
    """File names the plugin writes, optionally only for some host names."""
    if hostnames:
        hosts = "|".join(re.escape(h) for h in hostnames)
        return re.compile(rf"^(?P<host>{hosts})-pid(?P<pid>\d+)\.log$")
    return re.compile(rf"^{FILE_NAME}$")


class CclInspectorSource(Source):
    """Follows the Inspector output directory."""

    def __init__(self, name: str, config: CclInspectorSourceConfig) -> None:
        super().__init__(name, config)
        self.inspector = config
        self._call = BlockingCall(name)
        self._tail = DirectoryTail(
            config.dir,
            file_pattern(config.hostnames),
            max_line_bytes=config.max_line_bytes,
            max_read_bytes=config.max_read_bytes,
            max_files=config.max_files,
        )
        self._aggregator = InspectorAggregator(
            config.link_peak_bytes_per_second, config.max_comms, config.max_series
        )
        self._skipped = 0
        self._restarts = {"truncated": 0, "replaced": 0}
        self._refused = dict.fromkeys(REFUSED, 0)
        self._last = TailStats()
        self._log = log.get(source=name)

    def _collect(self) -> list[Reading]:
        # Runs on the BlockingCall thread, one call at a time: the tail and the
        # aggregator are only ever touched here.
        try:
            stats = self._tail.read(self._aggregator.add_line)
        except OSError as exc:
            reason = "permission_denied" if isinstance(exc, PermissionError) else "read_error"
            raise SourceError(reason, f"{self.inspector.dir}: {exc}") from None
        self._aggregator.finish()
        self._skipped += stats.skipped_bytes
        self._restarts["truncated"] += stats.truncations
        self._restarts["replaced"] += stats.replaced
        for reason, count in stats.refused.items():
            self._refused[reason] += count
        if stats.truncations or stats.replaced:
            self._log.info(
                "inspector files restarted",
                truncated=stats.truncations,
                replaced=stats.replaced,
            )
        self._last = stats
        out = self._aggregator.readings()
        out.append(Reading(ACCEL_CCL_INSPECTOR_FILES, (), float(stats.files)))
        out.append(Reading(ACCEL_CCL_INSPECTOR_SKIPPED_BYTES_TOTAL, (), float(self._skipped)))
        for reason, count in self._restarts.items():
            out.append(Reading(ACCEL_CCL_INSPECTOR_FILE_RESTARTS_TOTAL, (reason,), float(count)))
        for reason, count in self._refused.items():
            out.append(Reading(ACCEL_CCL_INSPECTOR_FILES_REFUSED_TOTAL, (reason,), float(count)))
        return out

    async def poll(self) -> Sequence[Reading]:
        """Read what the files gained and export the cumulative statistics."""
        return await self._call(self._collect)

    def status(self) -> dict[str, Any]:
        """Directory, files followed, last poll's reading statistics."""
        return {
            "dir": self.inspector.dir,
            "files": self._tail.following,
            "last_lines": self._last.lines,
            "last_bytes_read": self._last.bytes_read,
            "skipped_bytes": self._skipped,
        }
