"""The parts of the daemon's JSON documents (/status, /v1/devices) read from the store.

Kept apart from :mod:`exporter.app` so a check command (exporter.checks.samples) can
build the /v1/devices document without the daemon's lifecycle code.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from exporter import health_api
from exporter.health_api import SourceReport
from exporter.sources.base import DeviceLister, Source
from exporter.store import SourceRecordView, Store

# /status fields holding Unix times: each also gets a "<key>_rfc3339" twin, for people
# reading the document; the numbers stay, for the scripts that already read them.
EPOCH_KEYS = frozenset({"started_at", "last_success", "next_poll"})


def with_rfc3339(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with an RFC 3339 UTC string beside every Unix time in :data:`EPOCH_KEYS`."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out[key] = with_rfc3339(value) if isinstance(value, dict) else value
        if key in EPOCH_KEYS:
            out[f"{key}_rfc3339"] = (
                datetime.fromtimestamp(value, timezone.utc).isoformat(timespec="milliseconds")
                if isinstance(value, (int, float)) and not isinstance(value, bool)
                else None
            )
    return out


def source_state(record: SourceRecordView, now: float) -> tuple[str, str]:
    """(state, reason) of a source: unavailable, pending, ok, stale or failing."""
    if record.unavailable is not None:
        return "unavailable", record.unavailable
    if record.snapshot is None or not record.answered:
        return "pending", ""
    reason = record.down_reason(now)
    return ("ok" if not reason else ("stale" if reason == "stale" else "failing")), reason


def devices_document(
    store: Store, sources: Iterable[Source], node: str | None = None
) -> dict[str, Any]:
    """The /v1/devices document: every device source's devices with their verdict records.

    The verdicts are those on each source's latest snapshot in ``store`` (what every
    consumer reads, see exporter.verdict); whether that snapshot is still fresh
    decides whether they may be vouched for. ``node``: $NODE_NAME, else the host name.
    """
    now = time.monotonic()
    by_name = {s.name: s for s in sources}
    reports: list[SourceReport] = []
    for record in store.records():
        source = by_name.get(record.name)
        if not isinstance(source, DeviceLister):
            continue
        state, reason = source_state(record, now)
        snap = record.snapshot
        verdicts = {v.uuid: v for v in snap.health} if snap is not None else {}
        devices = source.health_report(verdicts)
        reports.append(SourceReport(record.name, state, reason, devices, record.fresh(now)))
    return health_api.document(reports, time.time(), node)
