"""The node's DeviceTaintRules: their names and labels, how a listed one reads, what a pass does.

Pure: no request is made here. :func:`plan` compares the rules the API server
listed (by our labels) with the verdicts and with what the writer holds each rule to
be (:class:`Intent`), and says what to create, patch and delete; the writer
(:mod:`exporter.outputs.kube_health`) sends it and checks the replies.

What a pass does with one device's rule, by the device's verdict:

- **bad** (failed; also degraded with ``taint_degraded``): a rule exists. Created
  with effect ``None`` ("no effect first"); once listed, the configured effect, or
  the effect the rule already had when that is stronger (an adopted ``NoExecute``
  stays ``NoExecute``: a restart never lowers an effect). A hand edit of the taint or
  the selector is restored; a rule deleted by hand is created again. The
  healthy-since annotation is removed.
- **recovering** (fresh data, a known state that is not bad): the rule is kept as it
  was. The first such pass writes the healthy-since time on the rule (annotation
  ``accel-exporter.io/healthy-since``, RFC 3339); the rule is deleted once fresh
  not-bad data holds and ``clear_after`` has passed since that time. The clock lives
  on the object, so a restart neither restarts nor skips it.
- **unknown** (state ``unknown``, or no fresh verdict at all): nothing is written,
  not even a repair: no action without fresh evidence.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from exporter.verdict import DEGRADED, FAILED, DeviceHealth

API_VERSION = "resource.k8s.io/v1beta2"  # the version Kubernetes 1.36 serves (KEP-5055 beta)
RULES_PATH = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
MANAGED_BY, OURS = "app.kubernetes.io/managed-by", "accel-exporter"
NODE_LABEL = "accel-exporter.io/node"
UUID_ANNOTATION = "accel-exporter.io/device-uuid"
NODE_ANNOTATION = "accel-exporter.io/node-name"
REASONS_ANNOTATION = "accel-exporter.io/reasons"
HEALTHY_SINCE = "accel-exporter.io/healthy-since"
# Effects from the mildest; a pass never picks a milder one than the rule holds.
EFFECTS = ("None", "NoSchedule", "NoExecute")
# A healthy-since time this far ahead of our clock was not written by a sane clock:
# the clock starts again rather than hold the rule until then.
FUTURE_SLACK_SECONDS = 300.0
BAD, RECOVERING, UNKNOWN = "bad", "recovering", "unknown"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def label_value(text: str) -> str:
    """``text`` if it is a valid label value, else a stable 32-character digest of it."""
    if not text or _LABEL_VALUE.match(text):
        return text
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def rule_name(node: str, uuid: str) -> str:
    """A DNS-subdomain name for the rule of one device on one node."""
    raw = re.sub(r"[^a-z0-9.-]+", "-", f"accel-exporter.{node}.{uuid}".lower()).strip("-.")
    if len(raw) <= 253:
        return raw
    return f"accel-exporter.{hashlib.sha256(raw.encode()).hexdigest()}"


def our_labels(node: str) -> dict[str, str]:
    """The labels every rule of this node's writer carries (and the list selects by)."""
    return {MANAGED_BY: OURS, NODE_LABEL: label_value(node)}


def selector_query(labels: Mapping[str, str]) -> str:
    """``labelSelector`` text for ``labels`` (sorted, so the request is stable)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def rfc3339(at: float) -> str:
    """Unix seconds as RFC 3339 UTC, to the second (what Kubernetes times look like)."""
    return datetime.fromtimestamp(int(at), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float | None:
    """RFC 3339 text as Unix seconds; None when it is not such a time."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def stronger(a: str, b: str) -> str:
    """The more disruptive of two effects (an unknown effect counts as the mildest)."""
    rank = {effect: i for i, effect in enumerate(EFFECTS)}
    return a if rank.get(a, -1) >= rank.get(b, -1) else b


def is_bad(health: DeviceHealth | None, taint_degraded: bool) -> bool:
    """Whether a verdict calls for a rule."""
    return health is not None and (
        health.state == FAILED or (taint_degraded and health.state == DEGRADED)
    )


def standing(health: DeviceHealth | None, taint_degraded: bool) -> str:
    """:data:`BAD`, :data:`RECOVERING` (known, not bad) or :data:`UNKNOWN` (unknown or absent)."""
    if is_bad(health, taint_degraded):
        return BAD
    if health is None or not health.known:
        return UNKNOWN
    return RECOVERING


@dataclass(frozen=True)
class Taint:
    """A rule's taint; ``timeAdded``, which the API server sets, is not ours to compare."""

    key: str
    value: str
    effect: str

    def as_dict(self) -> dict[str, str]:
        """The taint as the API takes it."""
        return {"key": self.key, "value": self.value, "effect": self.effect}

    @classmethod
    def of(cls, spec: Any) -> Taint:
        """The taint of a rule's ``spec`` (empty strings where a field is missing)."""
        taint = spec.get("taint") if isinstance(spec, dict) else None
        taint = taint if isinstance(taint, dict) else {}
        return cls(*(str(taint.get(k) or "") for k in ("key", "value", "effect")))


@dataclass(frozen=True)
class Selector:
    """Which device a rule selects: the DRA (driver, pool, device) of the node's slice."""

    driver: str
    pool: str
    device: str

    def as_dict(self) -> dict[str, str]:
        """The selector as the API takes it."""
        return {"driver": self.driver, "pool": self.pool, "device": self.device}

    @classmethod
    def of(cls, spec: Any) -> Selector:
        """The selector of a rule's ``spec`` (empty strings where a field is missing)."""
        sel = spec.get("deviceSelector") if isinstance(spec, dict) else None
        sel = sel if isinstance(sel, dict) else {}
        return cls(*(str(sel.get(k) or "") for k in ("driver", "pool", "device")))


@dataclass(frozen=True)
class Listed:
    """One of our rules as the API server holds it."""

    name: str
    uid: str
    uuid: str
    taint: Taint
    selector: Selector
    # The annotation as written ("" when absent), and as a time (None when absent or
    # not a time).
    healthy_since_text: str
    healthy_since: float | None
    reasons: str
    # Spec keys other than ours, set by hand (restored away).
    extra_selector_keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Listed | None:
        """Read one DeviceTaintRule; None when it names no device (not one a writer made)."""
        meta = item.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        notes = meta.get("annotations")
        notes = notes if isinstance(notes, dict) else {}
        uuid, name = notes.get(UUID_ANNOTATION), meta.get("name")
        if not isinstance(uuid, str) or not uuid or not isinstance(name, str) or not name:
            return None
        spec = item.get("spec")
        since = notes.get(HEALTHY_SINCE)
        since_text = since if isinstance(since, str) else ""
        raw_selector = spec.get("deviceSelector") if isinstance(spec, dict) else None
        extra = (
            tuple(sorted(k for k in raw_selector if k not in ("driver", "pool", "device")))
            if isinstance(raw_selector, dict)
            else ()
        )
        reasons = notes.get(REASONS_ANNOTATION)
        return cls(
            name=name,
            uid=str(meta.get("uid") or ""),
            uuid=uuid,
            taint=Taint.of(spec),
            selector=Selector.of(spec),
            healthy_since_text=since_text,
            healthy_since=parse_rfc3339(since_text) if since_text else None,
            reasons=reasons if isinstance(reasons, str) else "",
            extra_selector_keys=extra,
        )


def is_ours(item: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether an object carries every one of our labels (else it is someone else's)."""
    meta = item.get("metadata")
    found = meta.get("labels") if isinstance(meta, dict) else None
    found = found if isinstance(found, dict) else {}
    return all(found.get(k) == v for k, v in labels.items())


@dataclass(frozen=True)
class Intent:
    """What this writer holds one rule to be: the taint and selector it last wrote or adopted."""

    name: str
    taint: Taint
    selector: Selector

    @classmethod
    def adopted(cls, rule: Listed) -> Intent:
        """A rule found on the server is held as it is (never lowered by a restart)."""
        return cls(rule.name, rule.taint, rule.selector)


@dataclass(frozen=True)
class Settings:
    """What a pass needs from ``outputs.kubernetes``."""

    taint_key: str
    taint_effect: str
    taint_degraded: bool
    clear_after: float


@dataclass(frozen=True)
class Create:
    """A rule to create, effect ``None``, for a bad device that has none."""

    uuid: str
    health: DeviceHealth
    again: bool  # it had one this writer held: deleted behind our back


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch of one rule; ``intent`` is what the rule is once it applied."""

    uuid: str
    name: str
    body: dict[str, Any]
    intent: Intent
    # What the patch changes, for the log: effect, taint, selector, reasons, clock_set,
    # clock_cleared.
    what: tuple[str, ...]


@dataclass(frozen=True)
class Delete:
    """A rule whose device has been healthy for ``clear_after``: deleted with its uid."""

    uuid: str
    name: str
    uid: str
    healthy_since: float


Step = Create | Patch | Delete


@dataclass
class Plan:
    """What one pass sends, and how it sees each device that holds a rule."""

    steps: list[Step] = field(default_factory=list)
    # The intents after this pass's list (adopted rules added, vanished ones dropped);
    # a patch's new intent replaces one only once the server confirmed it.
    intents: dict[str, Intent] = field(default_factory=dict)
    # uuid -> RECOVERING or UNKNOWN: a rule kept for a device that is not bad now.
    held: dict[str, str] = field(default_factory=dict)
    # uuid -> the healthy-since time the rule carries (or is given by this pass).
    clocks: dict[str, float] = field(default_factory=dict)


def plan(
    listed: Mapping[str, Listed],
    intents: Mapping[str, Intent],
    health: Mapping[str, DeviceHealth],
    settings: Settings,
    now: float,
) -> Plan:
    """The steps that bring this node's rules in line with the verdicts (module docstring)."""
    out = Plan()
    for uuid in sorted(set(listed) | set(intents) | set(health)):
        dev = health.get(uuid)
        where = standing(dev, settings.taint_degraded)
        rule = listed.get(uuid)
        if rule is None:
            if where == BAD and dev is not None:
                out.steps.append(Create(uuid, dev, again=uuid in intents))
            continue  # gone, and not bad: nothing to hold
        intent = intents.get(uuid) or Intent.adopted(rule)
        out.intents[uuid] = intent
        if where == UNKNOWN:
            out.held[uuid] = UNKNOWN
            if rule.healthy_since is not None:
                out.clocks[uuid] = rule.healthy_since
        elif where == BAD and dev is not None:
            _bad(out, rule, intent, dev, settings)
        else:
            out.held[uuid] = RECOVERING
            _recovering(out, rule, intent, settings, now)
    return out


def _repair(rule: Listed, taint: Taint, selector: Selector) -> dict[str, Any]:
    """The spec part of a merge patch that makes ``rule`` carry ``taint`` and ``selector``."""
    spec: dict[str, Any] = {}
    if rule.taint != taint:
        spec["taint"] = taint.as_dict()
    if rule.selector != selector or rule.extra_selector_keys:
        # Keys added by hand are removed (null in a merge patch), ours set as they were.
        spec["deviceSelector"] = {
            **dict.fromkeys(rule.extra_selector_keys),
            **selector.as_dict(),
        }
    return spec


def _bad(out: Plan, rule: Listed, intent: Intent, dev: DeviceHealth, settings: Settings) -> None:
    effect = stronger(intent.taint.effect, settings.taint_effect)
    want = Intent(
        rule.name,
        Taint(settings.taint_key, label_value(dev.action), effect),
        intent.selector,
    )
    # out.intents keeps the rule as it is held until the server confirms the patch.
    spec = _repair(rule, want.taint, want.selector)
    what = _changes(rule, want)
    notes: dict[str, str | None] = {}
    if rule.healthy_since_text:
        notes[HEALTHY_SINCE] = None  # bad again: the clock stops
        what.append("clock_cleared")
    reasons = ",".join(dev.reason_names())
    if rule.reasons != reasons:
        notes[REASONS_ANNOTATION] = reasons
        what.append("reasons")
    body = _body(spec, notes)
    if body:
        out.steps.append(Patch(rule.uuid, rule.name, body, want, tuple(what)))


def _changes(rule: Listed, want: Intent) -> list[str]:
    """What differs between a listed rule and what it should be, for the log."""
    what = []
    if rule.taint.effect != want.taint.effect:
        what.append("effect")
    if (rule.taint.key, rule.taint.value) != (want.taint.key, want.taint.value):
        what.append("taint")
    if rule.selector != want.selector or rule.extra_selector_keys:
        what.append("selector")
    return what


def _recovering(out: Plan, rule: Listed, intent: Intent, settings: Settings, now: float) -> None:
    since = rule.healthy_since
    if since is not None and since > now + FUTURE_SLACK_SECONDS:
        since = None  # not a time our clock could have written: start again
    start = now if since is None else since
    out.clocks[rule.uuid] = start
    if now - start >= settings.clear_after:
        out.steps.append(Delete(rule.uuid, rule.name, rule.uid, start))
        return
    spec = _repair(rule, intent.taint, intent.selector)
    what = _changes(rule, intent)
    notes: dict[str, str | None] = {}
    if since is None:
        notes[HEALTHY_SINCE] = rfc3339(start)
        what.append("clock_set")
    body = _body(spec, notes)
    if body:
        out.steps.append(Patch(rule.uuid, rule.name, body, intent, tuple(what)))


def _body(spec: dict[str, Any], notes: dict[str, str | None]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if spec:
        body["spec"] = spec
    if notes:
        body["metadata"] = {"annotations": notes}
    return body


def create_body(
    name: str, node: str, labels: Mapping[str, str], dev: DeviceHealth, taint: Taint, at: Selector
) -> dict[str, Any]:
    """A new rule for ``dev`` selecting the DRA device ``at``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": name,
            "labels": dict(labels),
            "annotations": {
                UUID_ANNOTATION: dev.uuid,
                NODE_ANNOTATION: node,
                REASONS_ANNOTATION: ",".join(dev.reason_names()),
            },
        },
        "spec": {"deviceSelector": at.as_dict(), "taint": taint.as_dict()},
    }
