"""The ``GET /v1/devices`` document: each device's verdict, for plugins and agents.

A device plugin, a DRA driver or a node agent reads it (schema: docs/health-api.schema.json).

Pure: what the sources report in (each device with its verdict record, see
:mod:`exporter.verdict`), a JSON-ready dict out. The Kubernetes tri-state
(KEP-4680's Healthy, Unhealthy, Unknown) is derived here from the record: Unknown
whenever the exporter cannot vouch for it (the record is unknown: the worker down,
restarting or starting, the source reloading; or the source's data is stale, or the
device has no record yet), never Healthy by default; Unhealthy for a failed device
(its own errors, or isolation named it the culprit); Healthy otherwise (degraded and
predicted_failure devices still run jobs, their reasons say why to watch them).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from exporter.verdict import FAILED, DeviceHealth, Finding

API_VERSION = "accel-exporter/v1"
KIND = "DeviceHealthList"
HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"


@dataclass(frozen=True)
class DeviceReport:
    """One device as its source knows it, with its verdict record (None before any)."""

    vendor: str
    index: int
    device: str
    uuid: str
    pci_address: str
    verdict: DeviceHealth | None


@dataclass(frozen=True)
class SourceReport:
    """One device source: its state ("ok", "stale", "failing", ...) and its devices.

    ``fresh``: the snapshot the verdicts come from is younger than the source's
    ``stale_after`` (a failing poll's snapshot is fresh too: it judged what it could).
    """

    name: str
    state: str
    reason: str
    devices: list[DeviceReport]
    fresh: bool = True


def rfc3339(when: float) -> str | None:
    """A Unix time as RFC 3339 UTC with milliseconds; None for "never" (0)."""
    if when <= 0:
        return None
    return datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="milliseconds")


def tri_state(fresh: bool, verdict: DeviceHealth | None) -> str:
    """Healthy, Unhealthy or Unknown for one device, from its record and its freshness."""
    if not fresh or verdict is None or not verdict.known:
        return UNKNOWN
    return UNHEALTHY if verdict.state == FAILED else HEALTHY


def _reasons(verdict: DeviceHealth) -> list[dict[str, Any]]:
    """Health reasons and findings merged by reason: the state each leads to, the action."""
    found: dict[str, Finding] = {f.reason: f for f in verdict.findings}
    states = verdict.reason_states()
    out = []
    for reason in sorted(set(states) | set(found)):
        finding = found.get(reason)
        kind, _, code = reason.partition("_")
        out.append(
            {
                "reason": reason,
                "state": states.get(reason),
                "action": finding.action if finding else None,
                "code": code if kind in ("xid", "afid") else "",
                "immediate": finding.immediate if finding else "",
                "investigatory": finding.investigatory if finding else "",
                "severity": finding.severity if finding else "",
                "event_time": rfc3339(finding.at) if finding else None,
                # How far its action reaches, what next, and where the mapping comes from.
                "scope": finding.scope if finding else None,
                "escalation": finding.escalation if finding else "",
                # How far the escalation reaches; "" as far as scope (or none named).
                "escalation_scope": finding.escalation_scope
                if finding and finding.escalation
                else "",
                "detail": finding.detail if finding else "",
                "provenance": finding.provenance if finding else None,
                "reference": finding.reference if finding else "",
            }
        )
    return out


def _reach(verdict: DeviceHealth, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every device the recommended action reaches, with its device label where known.

    ``labels``: uuid -> device label of the devices the source lists (the scope's
    members are the source's devices, so a uuid it does not list has no label: null).
    """
    return [{"uuid": uuid, "device": labels.get(uuid)} for uuid in verdict.scope_uuids]


def _message(source: SourceReport, verdict: DeviceHealth | None) -> str:
    """One line a human reads in a Pod status or a node condition."""
    if verdict is not None and source.fresh and not verdict.known:
        text = f"source {source.name} {verdict.unknown_why}"
        if verdict.action != "none":
            remembered = ", ".join(f.reason for f in verdict.findings)
            text += f"; remembered {remembered}; recommended action: {verdict.action}"
        return text
    if not source.fresh or (verdict is None and source.state != "ok"):
        why = f": {source.reason}" if source.reason and source.reason != source.state else ""
        return f"source {source.name} is {source.state}{why}"
    if verdict is None:
        return "no verdict yet"
    if not verdict.reasons and verdict.action == "none":
        return "ok"
    reasons = ", ".join(verdict.reason_names()) or "none"
    return f"{verdict.state} ({reasons}); recommended action: {verdict.action}"


def document(
    sources: Iterable[SourceReport], now: float, node: str | None = None
) -> dict[str, Any]:
    """The /v1/devices document at Unix time ``now``, devices by source then index."""
    devices = []
    for source in sources:
        labels = {d.uuid: d.device for d in source.devices}
        for dev in sorted(source.devices, key=lambda d: (d.index, d.device)):
            verdict = dev.verdict
            devices.append(
                {
                    "source": source.name,
                    "vendor": dev.vendor,
                    "index": dev.index,
                    "device": dev.device,
                    "uuid": dev.uuid,
                    "pci_address": dev.pci_address,
                    "health": tri_state(source.fresh, verdict),
                    # The record's state; null while it is unknown (and before the first).
                    "verdict": verdict.state if verdict and verdict.known else None,
                    "recommended_action": verdict.action if verdict else None,
                    # How far it reaches, the devices it reaches (itself included; none
                    # while the action is none) and the next action if it does not help.
                    "action_scope": verdict.scope if verdict else None,
                    "action_scope_devices": _reach(verdict, labels) if verdict else [],
                    "escalation": verdict.escalation if verdict else "",
                    "escalation_scope": verdict.escalation_scope if verdict else "",
                    "reasons": _reasons(verdict) if verdict else [],
                    "message": _message(source, verdict),
                    "source_state": source.state,
                    "since": rfc3339(verdict.since) if verdict else None,
                    "last_updated": rfc3339(verdict.updated) if verdict else None,
                }
            )
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "node": node if node is not None else socket.gethostname(),
        "generated_at": rfc3339(now),
        "devices": devices,
    }
