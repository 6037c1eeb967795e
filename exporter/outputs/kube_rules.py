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

A rule covers the scope of a bad device's action (:mod:`exporter.outputs.kube_scope`):
one device's rule (keyed by its uuid) or a pool-wide one (keyed by
:func:`~exporter.outputs.kube_selector.pool_key`). It records its **culprits** (the
bad devices whose action put it there, annotation ``accel-exporter.io/culprits``),
and the rule's standing is theirs: bad while a culprit's scope still asks for it;
else unknown (held, nothing written) while any culprit is unknown or bad with a
scope not resolved; else recovering, with one healthy-since clock for the rule. A
rule an older writer made names no culprit: its device is its culprit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from exporter.outputs.kube_scope import Want
from exporter.outputs.kube_selector import POOL_PREFIX, Selector, pool_of_key
from exporter.verdict import DEGRADED, FAILED, DeviceHealth

API_VERSION = "resource.k8s.io/v1beta2"  # the version Kubernetes 1.36 serves (KEP-5055 beta)
RULES_PATH = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
MANAGED_BY, OURS = "app.kubernetes.io/managed-by", "accel-exporter"
NODE_LABEL = "accel-exporter.io/node"
UUID_ANNOTATION = "accel-exporter.io/device-uuid"
NODE_ANNOTATION = "accel-exporter.io/node-name"
REASONS_ANNOTATION = "accel-exporter.io/reasons"
HEALTHY_SINCE = "accel-exporter.io/healthy-since"
# A pool-wide rule's pool ("<driver>/<pool>"): what it is held by, as a device rule by
# its device's uuid (UUID_ANNOTATION).
POOL_ANNOTATION = "accel-exporter.io/pool"
# The bad devices whose action's scope put the rule there (comma-separated uuids).
CULPRITS_ANNOTATION = "accel-exporter.io/culprits"
# The uuids a pool-wide rule covers (comma-separated).
COVERS_ANNOTATION = "accel-exporter.io/device-uuids"
# The widest scope of the culprits' actions (device, partition, peer_domain, ...).
SCOPE_ANNOTATION = "accel-exporter.io/scope"
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


def pool_rule_name(node: str, driver: str, pool: str) -> str:
    """A DNS-subdomain name for the pool-wide rule of one pool on one node (stable)."""
    return rule_name(node, f"pool.{driver}.{pool}")


def key_rule_name(node: str, key: str) -> str:
    """The name of the rule held under ``key`` (a device's uuid or a pool's key)."""
    pool = pool_of_key(key)
    return pool_rule_name(node, *pool) if pool is not None else rule_name(node, key)


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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _csv(text: Any) -> tuple[str, ...]:
    """A comma-separated annotation as its sorted, distinct, non-empty items."""
    if not isinstance(text, str):
        return ()
    return tuple(sorted({item.strip() for item in text.split(",") if item.strip()}))


@dataclass(frozen=True)
class Listed:
    """One of our rules as the API server holds it."""

    name: str
    uid: str
    # What it is held by: its device's uuid, or pool_key(driver, pool) for a pool-wide rule.
    key: str
    taint: Taint
    selector: Selector
    # The annotation as written ("" when absent), and as a time (None when absent or
    # not a time).
    healthy_since_text: str
    healthy_since: float | None
    reasons: str
    # Spec keys other than ours, set by hand (restored away).
    extra_selector_keys: tuple[str, ...] = ()
    # The bad devices that asked for it (a rule an older writer made: its device).
    culprits: tuple[str, ...] = ()
    covers_text: str = ""
    scope: str = ""
    culprits_text: str = ""

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Listed | None:
        """Read one DeviceTaintRule; None when it names no device or pool (not a writer's)."""
        meta = item.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        notes = meta.get("annotations")
        notes = notes if isinstance(notes, dict) else {}
        uuid, pool, name = notes.get(UUID_ANNOTATION), notes.get(POOL_ANNOTATION), meta.get("name")
        if not isinstance(name, str) or not name:
            return None
        if isinstance(uuid, str) and uuid:
            key = uuid
        elif isinstance(pool, str) and pool_of_key(POOL_PREFIX + pool) is not None:
            key = POOL_PREFIX + pool
        else:
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
        culprits = _csv(notes.get(CULPRITS_ANNOTATION))
        if not culprits and key == uuid:
            culprits = (key,)
        return cls(
            name=name,
            uid=str(meta.get("uid") or ""),
            key=key,
            taint=Taint.of(spec),
            selector=Selector.of(spec),
            healthy_since_text=since_text,
            healthy_since=parse_rfc3339(since_text) if since_text else None,
            reasons=reasons if isinstance(reasons, str) else "",
            extra_selector_keys=extra,
            culprits=culprits,
            covers_text=_text(notes.get(COVERS_ANNOTATION)),
            scope=_text(notes.get(SCOPE_ANNOTATION)),
            culprits_text=_text(notes.get(CULPRITS_ANNOTATION)),
        )


def is_ours(item: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether an object carries every one of our labels (else it is someone else's)."""
    meta = item.get("metadata")
    found = meta.get("labels") if isinstance(meta, dict) else None
    found = found if isinstance(found, dict) else {}
    return all(found.get(k) == v for k, v in labels.items())


@dataclass(frozen=True)
class Intent:
    """What this writer holds one rule to be: what it last wrote or adopted, and its culprits."""

    name: str
    taint: Taint
    selector: Selector
    culprits: tuple[str, ...] = ()

    @classmethod
    def adopted(cls, rule: Listed) -> Intent:
        """A rule found on the server is held as it is (never lowered by a restart)."""
        return cls(rule.name, rule.taint, rule.selector, rule.culprits)


@dataclass(frozen=True)
class Settings:
    """What a pass needs from ``outputs.kubernetes``."""

    taint_key: str
    taint_effect: str
    taint_degraded: bool
    clear_after: float


@dataclass(frozen=True)
class Create:
    """A rule to create, effect ``None``, for a scope that asks for one and has none."""

    key: str
    want: Want
    again: bool  # it had one this writer held: deleted behind our back


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch of one rule; ``intent`` is what the rule is once it applied."""

    key: str
    name: str
    body: dict[str, Any]
    intent: Intent
    # What the patch changes, for the log: effect, taint, selector, reasons, culprits,
    # covers, scope, clock_set, clock_cleared.
    what: tuple[str, ...]


@dataclass(frozen=True)
class Delete:
    """A rule whose culprits have been healthy for ``clear_after``: deleted with its uid."""

    key: str
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
    # culprit uuid -> RECOVERING or UNKNOWN: a rule kept for a culprit that is not bad now.
    held: dict[str, str] = field(default_factory=dict)
    # rule key -> the healthy-since time the rule carries (or is given by this pass).
    clocks: dict[str, float] = field(default_factory=dict)


def plan(
    listed: Mapping[str, Listed],
    intents: Mapping[str, Intent],
    health: Mapping[str, DeviceHealth],
    wants: Mapping[str, Want],
    settings: Settings,
    now: float,
    pending: frozenset[str] = frozenset(),
) -> Plan:
    """The steps that bring this node's rules in line with the verdicts (module docstring).

    ``wants`` are the rules the bad devices' scopes ask for (kube_scope.targets),
    ``pending`` the bad devices whose scope did not all resolve: a rule they named is
    kept as it is.
    """
    out = Plan()
    for key in sorted(set(listed) | set(intents) | set(wants)):
        want = wants.get(key)
        rule = listed.get(key)
        if rule is None:
            if want is not None:
                out.steps.append(Create(key, want, again=key in intents))
            continue  # gone, and not asked for: nothing to hold
        intent = intents.get(key) or Intent.adopted(rule)
        out.intents[key] = intent
        culprits = tuple(sorted(set(rule.culprits) | set(want.culprits if want else ())))
        ways = {c: standing(health.get(c), settings.taint_degraded) for c in culprits}
        out.held.update({c: how for c, how in ways.items() if how != BAD})
        if want is not None:
            _bad(out, rule, intent, want, settings)
        elif UNKNOWN in ways.values() or pending & set(culprits):
            # No fresh evidence for a culprit (or where its scope is): nothing is written.
            if rule.healthy_since is not None:
                out.clocks[key] = rule.healthy_since
        else:
            _recovering(out, rule, intent, settings, now)
    return out


def _repair(rule: Listed, taint: Taint, selector: Selector) -> dict[str, Any]:
    """The spec part of a merge patch that makes ``rule`` carry ``taint`` and ``selector``."""
    spec: dict[str, Any] = {}
    if rule.taint != taint:
        spec["taint"] = taint.as_dict()
    if rule.selector != selector or rule.extra_selector_keys:
        # Keys added by hand are removed (null in a merge patch), ours set as they were
        # (a device added to a pool-wide rule removed as well).
        gone = [*rule.extra_selector_keys, *(["device"] if not selector.device else [])]
        spec["deviceSelector"] = {**dict.fromkeys(gone), **selector.as_dict()}
    return spec


def _notes(rule: Listed, want: Want, culprits: tuple[str, ...]) -> dict[str, str | None]:
    """The annotations that say who asked for the rule, where they differ from the rule's."""
    notes: dict[str, str | None] = {}
    wanted = {
        REASONS_ANNOTATION: (rule.reasons, ",".join(want.reasons)),
        CULPRITS_ANNOTATION: (rule.culprits_text, ",".join(culprits)),
        SCOPE_ANNOTATION: (rule.scope, want.scope),
    }
    if want.pool_wide:
        wanted[COVERS_ANNOTATION] = (rule.covers_text, ",".join(want.covers))
    for name, (has, should) in wanted.items():
        if has != should:
            notes[name] = should
    return notes


_NOTE_WHAT = {
    REASONS_ANNOTATION: "reasons",
    CULPRITS_ANNOTATION: "culprits",
    SCOPE_ANNOTATION: "scope",
    COVERS_ANNOTATION: "covers",
}


def _bad(out: Plan, rule: Listed, intent: Intent, want: Want, settings: Settings) -> None:
    effect = stronger(intent.taint.effect, settings.taint_effect)
    # The culprits recorded stay until the rule goes: each must clear before it does.
    culprits = tuple(sorted(set(rule.culprits) | set(want.culprits)))
    taint = Taint(settings.taint_key, label_value(want.action), effect)
    want_intent = Intent(rule.name, taint, intent.selector, culprits)
    # out.intents keeps the rule as it is held until the server confirms the patch.
    spec = _repair(rule, want_intent.taint, want_intent.selector)
    what = _changes(rule, want_intent)
    notes = _notes(rule, want, culprits)
    what += [_NOTE_WHAT[n] for n in notes]
    if rule.healthy_since_text:
        notes[HEALTHY_SINCE] = None  # asked for again: the clock stops
        what.append("clock_cleared")
    body = _body(spec, notes)
    if body:
        out.steps.append(Patch(rule.key, rule.name, body, want_intent, tuple(what)))


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
    out.clocks[rule.key] = start
    if now - start >= settings.clear_after:
        out.steps.append(Delete(rule.key, rule.name, rule.uid, start))
        return
    spec = _repair(rule, intent.taint, intent.selector)
    what = _changes(rule, intent)
    notes: dict[str, str | None] = {}
    if since is None:
        notes[HEALTHY_SINCE] = rfc3339(start)
        what.append("clock_set")
    body = _body(spec, notes)
    if body:
        out.steps.append(Patch(rule.key, rule.name, body, intent, tuple(what)))


def _body(spec: dict[str, Any], notes: dict[str, str | None]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if spec:
        body["spec"] = spec
    if notes:
        body["metadata"] = {"annotations": notes}
    return body


def create_body(
    name: str, node: str, labels: Mapping[str, str], want: Want, taint: Taint
) -> dict[str, Any]:
    """A new rule for ``want``: its device (annotated with its uuid) or its whole pool."""
    notes = {
        NODE_ANNOTATION: node,
        REASONS_ANNOTATION: ",".join(want.reasons),
        CULPRITS_ANNOTATION: ",".join(want.culprits),
        SCOPE_ANNOTATION: want.scope,
    }
    if want.pool_wide:
        notes[POOL_ANNOTATION] = f"{want.selector.driver}/{want.selector.pool}"
        notes[COVERS_ANNOTATION] = ",".join(want.covers)
    else:
        notes[UUID_ANNOTATION] = want.key
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": dict(labels), "annotations": notes},
        "spec": {"deviceSelector": want.selector.as_dict(), "taint": taint.as_dict()},
    }
