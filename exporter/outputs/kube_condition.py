"""The Node condition ``AcceleratorHealthy``: what it should say, and when to write it.

Pure: the writer (:mod:`exporter.outputs.kube_health`) reads the node once at start,
asks :func:`wanted` each pass and patches when :meth:`Written.due` says so: on a
change of status, reason or message, else as a heartbeat at most every
``heartbeat`` (Node Problem Detector's 5 minutes), so a quiet node costs the API
server and every Node watcher a dozen updates an hour, not one per interval.

What it says:

- ``False`` (``AcceleratorUnhealthy``) while a device is bad, or recovering with its
  rule still held (``clear_after`` has not passed);
- else, while a device is unknown (its worker down, its data stale, no verdict for a
  device that holds a rule): the status the node carries is kept, the message says
  which devices are unknown. An unknown device never turns it ``False``, and never
  lifts a ``False`` either;
- ``True`` (``AcceleratorsHealthy``) when every device has a known, good verdict;
- nothing at all while the store has no verdict (a restart before the first poll
  must not flip ``False`` to ``Unknown``).

A device whose action reaches wider than itself says how far and how many devices
(``3 (GPU-...) failed: afid_30 -> replace_device (baseboard: 8 devices)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.outputs.kube_rules import RECOVERING, UNKNOWN, is_bad, parse_rfc3339, rfc3339
from exporter.verdict import DeviceHealth

CONDITION = "AcceleratorHealthy"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class Condition:
    """What the condition says: compared to decide whether a patch is a change."""

    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Written:
    """The condition as the node carries it (read at start, then as last patched)."""

    condition: Condition
    transition: str  # lastTransitionTime, RFC 3339
    heartbeat: float | None  # lastHeartbeatTime, Unix seconds

    def due(self, want: Condition, now: float, heartbeat: float) -> bool:
        """Whether to patch: a change, or the heartbeat is due."""
        return want != self.condition or self.heartbeat is None or now - self.heartbeat >= heartbeat


def carried(node: Mapping[str, Any]) -> Written | None:
    """The ``AcceleratorHealthy`` condition of a Node object, or None when it has none."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for item in conditions if isinstance(conditions, list) else []:
        if isinstance(item, dict) and item.get("type") == CONDITION:
            text = {k: str(item.get(k) or "") for k in ("status", "reason", "message")}
            beat = str(item.get("lastHeartbeatTime") or "")
            return Written(
                Condition(text["status"], text["reason"], text["message"]),
                str(item.get("lastTransitionTime") or ""),
                parse_rfc3339(beat) if beat else None,
            )
    return None


def _describe(uuid: str, dev: DeviceHealth | None, how: str) -> str:
    name = dev.device if dev is not None and dev.device else "?"
    text = f"{name} ({uuid}) {how}"
    if dev is not None and how != UNKNOWN and dev.reasons:
        text += f": {','.join(dev.reason_names())}"
    if dev is not None and how == UNKNOWN and dev.unknown_why:
        text += f" ({dev.unknown_why})"
    if dev is not None and dev.action and dev.action != "none":
        text += f" -> {dev.action}"
        reached = set(dev.scope_uuids) | {dev.uuid}
        if dev.scope != "device" and len(reached) > 1:
            # How far the action reaches: the other devices are tainted for it too.
            text += f" ({dev.scope}: {len(reached)} devices)"
    return text


def wanted(
    health: Mapping[str, DeviceHealth],
    held: Mapping[str, str],
    previous: Written | None,
    taint_degraded: bool,
) -> Condition | None:
    """The condition to carry now; None to leave the node as it is (no verdict at all).

    ``held`` names the devices kept unhealthy although not bad now (uuid ->
    ``recovering`` or ``unknown``); ``previous`` is what the node carries (None:
    no such condition yet).
    """
    if not health:
        return None
    bad = {u for u, d in health.items() if is_bad(d, taint_degraded)}
    unknown = {u for u, d in health.items() if not d.known}
    unknown |= {u for u, how in held.items() if how == UNKNOWN and u not in health}
    recovering = {u for u, how in held.items() if how == RECOVERING and u not in bad}
    parts = []
    for uuid in sorted(bad | recovering | unknown):
        dev = health.get(uuid)
        how = (
            dev.state
            if uuid in bad and dev is not None
            else (RECOVERING if uuid in recovering else UNKNOWN)
        )
        parts.append(_describe(uuid, dev, how))
    message = "; ".join(parts)
    if bad or recovering:
        return Condition("False", "AcceleratorUnhealthy", message[:MAX_MESSAGE])
    healthy = len(health) - len(unknown & set(health))
    if unknown:
        # Evidence for nothing: the status and reason stay, the message says why.
        summary = f"{healthy} accelerators healthy; unknown: {message}"
        if previous is None:
            return Condition("Unknown", "NoHealthData", summary[:MAX_MESSAGE])
        kept = previous.condition
        return Condition(kept.status, kept.reason, summary[:MAX_MESSAGE])
    return Condition("True", "AcceleratorsHealthy", f"{healthy} accelerators healthy")


def patch_body(want: Condition, previous: Written | None, now: float) -> dict[str, Any]:
    """The strategic merge patch of ``nodes/<node>/status`` (merged by type: others untouched)."""
    same = previous is not None and previous.condition.status == want.status
    transition = previous.transition if same and previous and previous.transition else None
    condition = {
        "type": CONDITION,
        "status": want.status,
        "reason": want.reason,
        "message": want.message,
        "lastHeartbeatTime": rfc3339(now),
        "lastTransitionTime": transition or rfc3339(now),
    }
    return {"status": {"conditions": [condition]}}


def written(body: Mapping[str, Any], now: float) -> Written:
    """What the node carries once ``body`` (from :func:`patch_body`) applied."""
    (sent,) = body["status"]["conditions"]
    return Written(
        Condition(sent["status"], sent["reason"], sent["message"]),
        sent["lastTransitionTime"],
        now,
    )
