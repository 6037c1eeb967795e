"""The writes of the Kubernetes health writer: each request counted, each reply checked.

:class:`RuleWrites` is the writing half of
:class:`~exporter.outputs.kube_health.KubeHealthWriter` (which adds the
reconcile loop, the listing and the Node condition): every API request goes
through :meth:`RuleWrites._request` (counted; none once stopping), and a
DeviceTaintRule is created, patched or deleted here, the reply checked against
what was sent before the writer believes it (:func:`expect`).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from exporter.config.outputs import KubernetesOutputConfig
from exporter.kube import KubeClient, KubeError, Reply
from exporter.outputs.kube_rules import (
    HEALTHY_SINCE,
    RULES_PATH,
    Create,
    Delete,
    Intent,
    Listed,
    Patch,
    Taint,
    create_body,
    is_ours,
    key_rule_name,
    label_value,
    rfc3339,
)

MERGE_PATCH = "application/merge-patch+json"


class Stopped(Exception):
    """The writer is stopping: the pass ends before its next request."""


def expect(reply: Reply, kind: str, name: str = "") -> dict[str, Any]:
    """The body of a 2xx reply that is a ``kind`` (named ``name``); else KubeError."""
    if not 200 <= reply.status < 300:
        message = str(reply.body.get("message", ""))[:300]
        raise KubeError(f"http_{reply.status}", f"{kind}: HTTP {reply.status} {message}")
    body = reply.body
    meta = body.get("metadata")
    got = meta.get("name") if isinstance(meta, dict) else None
    if body.get("kind") != kind or (name and got != name):
        raise KubeError(
            "bad_reply", f"expected {kind} {name}, got {str(body.get('kind'))[:60]} {got!s:.100}"
        )
    return body


def bad_reply(what: str) -> KubeError:
    """A reply that is not what was asked for: the failure ``bad_reply``."""
    return KubeError("bad_reply", what)


class RuleWrites:
    """Requests and the three writes of a rule (see the module docstring)."""

    config: KubernetesOutputConfig
    client: KubeClient
    node: str
    _labels: dict[str, str]
    _intents: dict[str, Intent]
    _held: dict[str, str]
    _clocks: dict[str, float]
    _requests: Counter[str]
    _lock: threading.Lock
    _stop: threading.Event
    _log: Any

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        """Every API request of the writer: counted, and none once stopping."""
        if self._stop.is_set():
            raise Stopped
        with self._lock:
            self._requests[method] += 1
        return self.client.request(method, path, body, content_type)

    def _create(self, item: Create) -> None:
        want = item.want
        name = key_rule_name(self.node, item.key)
        # No effect first, whatever is configured.
        taint = Taint(self.config.taint_key, label_value(want.action), "None")
        body = create_body(name, self.node, self._labels, want, taint)
        reply = self._request("POST", RULES_PATH, body)
        if reply.status == 409:  # exists: ours from a run we did not see, or someone else's
            existing = expect(self._request("GET", f"{RULES_PATH}/{name}"), "DeviceTaintRule", name)
            found = Listed.of(existing) if is_ours(existing, self._labels) else None
            if found is None or found.key != item.key:
                raise KubeError("conflict", f"DeviceTaintRule {name} exists and is not ours")
            with self._lock:
                self._intents[item.key] = Intent.adopted(found)
            self._log.info("device taint rule adopted", key=item.key, rule=name)
            return
        answer = Listed.of(expect(reply, "DeviceTaintRule", name))
        if answer is None or answer.taint != taint or answer.selector != want.selector:
            raise bad_reply(f"create {name}: the reply is not the rule sent")
        with self._lock:
            self._intents[item.key] = Intent(name, taint, want.selector, want.culprits)
        self._log.info(
            "device taint recreated" if item.again else "device tainted",
            key=item.key,
            rule=name,
            effect=taint.effect,
            scope=want.scope,
            pool_wide=want.pool_wide,
            devices=len(want.covers),
            culprits=list(want.culprits),
            reasons=list(want.reasons),
        )

    def _patch(self, item: Patch) -> None:
        reply = self._request("PATCH", f"{RULES_PATH}/{item.name}", item.body, MERGE_PATCH)
        if reply.status == 404:  # deleted behind our back: made again at the next pass
            with self._lock:
                self._intents.pop(item.key, None)
            self._log.warning("device taint rule gone", key=item.key, rule=item.name)
            return
        answer = Listed.of(expect(reply, "DeviceTaintRule", item.name))
        notes = item.body.get("metadata", {}).get("annotations", {})
        # The healthy-since text the rule must now carry ("" once removed); None: not touched.
        since = (notes[HEALTHY_SINCE] or "") if HEALTHY_SINCE in notes else None
        if (
            answer is None
            or answer.taint != item.intent.taint
            or answer.selector != item.intent.selector
            or (since is not None and answer.healthy_since_text != since)
        ):
            raise bad_reply(f"patch {item.name}: the reply is not the rule patched")
        with self._lock:
            self._intents[item.key] = item.intent
        if "effect" in item.what:
            self._log.info(
                "taint effect set", key=item.key, rule=item.name, effect=item.intent.taint.effect
            )
        if {"taint", "selector"} & set(item.what):
            self._log.warning(
                "device taint rule repaired",
                key=item.key,
                rule=item.name,
                what=[w for w in item.what if w in ("taint", "selector")],
            )
        if "clock_set" in item.what:
            self._log.info(
                "device healthy again, taint held",
                key=item.key,
                rule=item.name,
                healthy_since=since,
                clear_after=self.config.clear_after,
            )

    def _delete(self, item: Delete) -> None:
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": item.uid} if item.uid else {},
        }
        reply = self._request("DELETE", f"{RULES_PATH}/{item.name}", options)
        if reply.status == 409:  # its uid changed since the list: not the rule we held
            raise KubeError("conflict", f"DeviceTaintRule {item.name} was replaced")
        if reply.status != 404:
            kind = reply.body.get("kind")
            expect(reply, kind if kind in ("Status", "DeviceTaintRule") else "Status")
            if kind == "Status" and reply.body.get("status") != "Success":
                raise bad_reply(f"delete {item.name}: Status {reply.body.get('status')!s:.40}")
        with self._lock:
            self._intents.pop(item.key, None)
            self._clocks.pop(item.key, None)
            # Its culprits are no longer held, unless another rule still names them.
            named = {c for intent in self._intents.values() for c in intent.culprits}
            self._held = {c: how for c, how in self._held.items() if c in named}
        self._log.info(
            "device taint removed",
            key=item.key,
            rule=item.name,
            healthy_since=rfc3339(item.healthy_since),
        )
