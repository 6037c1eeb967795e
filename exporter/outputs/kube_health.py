"""The health verdict written to Kubernetes: DeviceTaintRules and a Node condition.

Opt-in (``outputs.kubernetes.enabled``). Every ``interval`` it reads this node's
device verdicts from the store (only fresh data is there: a device whose source is
stale or down is unknown and left as it is) and reconciles:

- per failed device (also degraded ones with ``taint_degraded``) a
  ``resource.k8s.io/v1beta2`` DeviceTaintRule selecting it by driver, pool and
  device, as the node's DRA ResourceSlice names it (an injected resolver maps the
  uuid). It is created with effect ``None`` (KEP-5055's "no effect first": the
  rule's status shows what it would evict) and set to the configured ``NoSchedule``
  or ``NoExecute`` one reconciliation later, never without configuration. It is
  deleted once the device has been healthy for ``clear_after`` (hysteresis);
- the Node condition ``AcceleratorHealthy`` on this node only, for device-plugin
  clusters: False naming the devices, reasons and actions; True; Unknown without data.

It never touches an object it did not create: its rules carry its labels (managed-by
and this node), and a delete is preceded by a read that checks them and sent with the
read object's uid as precondition. It never raises into the daemon: every failure is
counted by reason in /status and the next interval tries again. It runs on its own
thread, so a hung API server delays only it (each request has a timeout).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from exporter import log
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.outputs import KubernetesOutputConfig
from exporter.health import DEGRADED, FAILED
from exporter.kube import KubeClient, KubeError, Reply
from exporter.store import Store, View

API_VERSION = "resource.k8s.io/v1beta2"  # the version Kubernetes 1.36 serves (KEP-5055 beta)
RULES_PATH = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
MANAGED_BY, OURS = "app.kubernetes.io/managed-by", "accel-exporter"
NODE_LABEL = "accel-exporter.io/node"
UUID_ANNOTATION = "accel-exporter.io/device-uuid"
CONDITION = "AcceleratorHealthy"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class DraRef(Protocol):
    """A device as DRA names it (exporter.enrich.dra.DraDevice has this shape)."""

    @property
    def driver(self) -> str:
        """The DRA driver's name (ResourceSlice spec.driver)."""
        ...

    @property
    def pool(self) -> str:
        """The pool (ResourceSlice spec.pool.name)."""
        ...

    @property
    def device(self) -> str:
        """The device's name in its slice (spec.devices[].name)."""
        ...


# uuid -> the DRA device, or None when no ResourceSlice of this node publishes it.
Resolver = Callable[[str], DraRef | None]


@dataclass(frozen=True)
class DeviceVerdict:
    """One device's verdict as the store has it."""

    device: str
    uuid: str
    state: str
    reasons: tuple[str, ...]
    action: str


def verdicts(view: View) -> dict[str, DeviceVerdict]:
    """The verdict of every device the store has fresh data for, by uuid."""
    states = {r.labels[:2]: r.labels[2] for r in view.readings("accel_device_health") if r.value}
    reasons: dict[tuple[str, ...], list[str]] = {}
    for r in view.readings("accel_device_health_reason_info"):
        reasons.setdefault(r.labels[:2], []).append(r.labels[2])
    todo = {
        r.labels[:2]: r.labels[2]
        for r in view.readings("accel_device_recommended_action")
        if r.value
    }
    return {
        ident[1]: DeviceVerdict(
            ident[0], ident[1], state, tuple(sorted(reasons.get(ident, []))), todo.get(ident, "")
        )
        for ident, state in states.items()
    }


@dataclass
class Rule:
    """A DeviceTaintRule this writer made: its name and the taint last written."""

    name: str
    taint: dict[str, str]


def label_value(text: str) -> str:
    """``text`` if it is a valid label value, else a stable 32-character digest of it."""
    return text if _LABEL_VALUE.match(text) else hashlib.sha256(text.encode()).hexdigest()[:32]


def rule_name(node: str, uuid: str) -> str:
    """A DNS-subdomain name for the rule of one device on one node."""
    raw = re.sub(r"[^a-z0-9.-]+", "-", f"accel-exporter.{node}.{uuid}".lower()).strip("-.")
    if len(raw) <= 253:
        return raw
    return f"accel-exporter.{hashlib.sha256(raw.encode()).hexdigest()}"


class KubeHealthWriter:
    """The ``outputs.kubernetes`` writer; see the module docstring."""

    name = "kubernetes"

    def __init__(
        self,
        config: KubernetesOutputConfig,
        store: Store,
        *,
        kube: KubernetesConfig | None = None,
        resolver: Resolver | None = None,
        env: Mapping[str, str] = os.environ,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.resolver = resolver
        self.wall = wall
        # The API server, node and credentials: the kubernetes section (in-cluster defaults).
        self.client = KubeClient.from_config(kube or KubernetesConfig(), config.timeout, env=env)
        self.node = self.client.node
        self._labels = {MANAGED_BY: OURS, NODE_LABEL: label_value(self.node)}
        self._rules: dict[str, Rule] = {}
        self._adopted = False
        # uuid -> Unix time it was first seen healthy again (None while still bad).
        self._held: dict[str, float | None] = {}
        self._condition: tuple[str, float] | None = None  # (status, since)
        self._unresolved: list[str] = []
        self._failures: Counter[str] = Counter()
        self._last_error = ""
        self._last_success: float | None = None
        self._reconciles = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.get(output="kubernetes", node=self.node)

    # -- the Output protocol ---------------------------------------------------------

    async def start(self) -> None:
        """Start the reconcile thread."""
        self._thread = threading.Thread(target=self._run, name="kube-health", daemon=True)
        self._thread.start()

    async def stop(self, deadline: float) -> None:
        """Stop the thread; a request in flight ends at its own timeout (not waited for)."""
        self._stop.set()

    def status(self) -> dict[str, Any]:
        """Rules, condition and failures for /status."""
        with self._lock:
            return {
                "node": self.node,
                "api_server": self.client.url,
                "rules": {uuid: {"name": r.name, **r.taint} for uuid, r in self._rules.items()},
                "unresolved_devices": list(self._unresolved),
                "condition": self._condition[0] if self._condition else None,
                "failures": dict(self._failures),
                "last_error": self._last_error,
                "last_success": self._last_success,
                "reconciles": self._reconciles,
            }

    def _run(self) -> None:
        while not self._stop.is_set():
            self.reconcile()
            self._stop.wait(self.config.interval)

    # -- one reconciliation ----------------------------------------------------------

    def reconcile(self) -> None:
        """Bring the rules and the condition in line with the store; never raises."""
        try:
            if not self.client.url or not self.node:
                raise KubeError(
                    "not_configured",
                    "no API server (KUBERNETES_SERVICE_HOST) or node name (NODE_NAME)",
                )
            now = self.wall()
            devices = verdicts(self.store.view())
            bad = self._hold(devices, now)
            if self.config.taint_rules:
                self._reconcile_rules(devices, bad)
            if self.config.node_condition:
                self._write_condition(devices, bad, now)
            with self._lock:
                self._last_success = now
                self._reconciles += 1
        except KubeError as exc:
            self._fail(exc.reason, exc.detail)
        except Exception as exc:  # never into the daemon: counted, logged, retried
            self._fail("internal", repr(exc))

    def _fail(self, reason: str, detail: str) -> None:
        with self._lock:
            self._failures[reason] += 1
            first = self._last_error != detail
            self._last_error = detail
        if first:  # logged once per distinct problem, not every interval
            self._log.warning("kubernetes write failed", reason=reason, detail=detail)

    def _is_bad(self, dev: DeviceVerdict) -> bool:
        return dev.state == FAILED or (self.config.taint_degraded and dev.state == DEGRADED)

    def _hold(self, devices: dict[str, DeviceVerdict], now: float) -> dict[str, DeviceVerdict]:
        """The devices treated as unhealthy: bad now, or bad and not yet healthy long enough.

        A device the store has no fresh data for keeps whatever it had (unknown is no
        recovery).
        """
        for uuid, dev in devices.items():
            if self._is_bad(dev):
                self._held[uuid] = None
            elif uuid in self._held:
                since = self._held[uuid]
                if since is None:
                    self._held[uuid] = now
                elif now - since >= self.config.clear_after:
                    del self._held[uuid]
        return {
            uuid: devices.get(uuid) or DeviceVerdict("", uuid, "unknown", (), "")
            for uuid in self._held
        }

    # -- DeviceTaintRules ------------------------------------------------------------

    def _selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self._labels.items()))

    def _ours(self, body: Mapping[str, Any]) -> bool:
        labels = body.get("metadata", {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self._labels.items())

    def _adopt(self) -> None:
        """Take over the rules an earlier run on this node left (found by our labels)."""
        from urllib.parse import quote

        reply = self.client.request("GET", f"{RULES_PATH}?labelSelector={quote(self._selector())}")
        self._check(reply, "list")
        found = {}
        for item in reply.body.get("items", []):
            meta = item.get("metadata", {})
            uuid = (meta.get("annotations") or {}).get(UUID_ANNOTATION, "")
            if uuid and self._ours(item):
                taint = item.get("spec", {}).get("taint", {})
                found[uuid] = Rule(meta["name"], {k: taint.get(k, "") for k in TAINT_KEYS})
        with self._lock:  # /status reads the rules from an HTTP thread
            self._rules.update(found)
        self._adopted = True

    def _reconcile_rules(
        self, devices: dict[str, DeviceVerdict], bad: dict[str, DeviceVerdict]
    ) -> None:
        if not self._adopted:
            self._adopt()
        unresolved = []
        for uuid, dev in sorted(bad.items()):
            rule = self._rules.get(uuid)
            if rule is None:
                ref = self.resolver(uuid) if self.resolver is not None else None
                if ref is None:
                    unresolved.append(uuid)
                    continue
                self._create(dev, ref)
            elif self._is_bad(dev):  # a recovering device keeps its taint as it was
                self._update(rule, dev)
        for uuid in [u for u in self._rules if u not in bad]:
            self._delete(uuid, self._rules[uuid])
        with self._lock:
            self._unresolved = unresolved

    def _taint(self, dev: DeviceVerdict, effect: str) -> dict[str, str]:
        return {"key": self.config.taint_key, "value": label_value(dev.action), "effect": effect}

    def _create(self, dev: DeviceVerdict, ref: DraRef) -> None:
        name = rule_name(self.node, dev.uuid)
        taint = self._taint(dev, "None")  # no effect first, whatever is configured
        body = {
            "apiVersion": API_VERSION,
            "kind": "DeviceTaintRule",
            "metadata": {
                "name": name,
                "labels": dict(self._labels),
                "annotations": {
                    UUID_ANNOTATION: dev.uuid,
                    "accel-exporter.io/node-name": self.node,
                    "accel-exporter.io/reasons": ",".join(dev.reasons),
                },
            },
            "spec": {
                "deviceSelector": {"driver": ref.driver, "pool": ref.pool, "device": ref.device},
                "taint": taint,
            },
        }
        reply = self.client.request("POST", RULES_PATH, body)
        if reply.status == 409:  # exists: ours from a run we did not see, or someone else's
            existing = self.client.request("GET", f"{RULES_PATH}/{name}")
            self._check(existing, "get")
            if not self._ours(existing.body):
                raise KubeError("conflict", f"DeviceTaintRule {name} exists and is not ours")
            spec_taint = existing.body.get("spec", {}).get("taint", {})
            taint = {k: spec_taint.get(k, "") for k in TAINT_KEYS}
        else:
            self._check(reply, "create")
            self._log.info("device tainted", uuid=dev.uuid, rule=name, effect="None")
        with self._lock:
            self._rules[dev.uuid] = Rule(name, taint)

    def _update(self, rule: Rule, dev: DeviceVerdict) -> None:
        # The configured effect only once the rule exists with effect None (a later pass).
        effect = self.config.taint_effect if rule.taint.get("effect") else "None"
        want = self._taint(dev, effect)
        if want == rule.taint:
            return
        patch = {"spec": {"taint": want}}
        reply = self.client.request("PATCH", f"{RULES_PATH}/{rule.name}", patch, MERGE_PATCH)
        if reply.status == 404:  # deleted behind our back: made again at the next pass
            with self._lock:
                self._rules = {u: r for u, r in self._rules.items() if r is not rule}
            return
        self._check(reply, "patch")
        if want["effect"] != rule.taint.get("effect"):
            self._log.info("taint effect set", rule=rule.name, effect=want["effect"])
        with self._lock:
            rule.taint = want

    def _delete(self, uuid: str, rule: Rule) -> None:
        path = f"{RULES_PATH}/{rule.name}"
        existing = self.client.request("GET", path)
        if existing.status != 404:
            self._check(existing, "get")
            if not self._ours(existing.body):  # replaced by someone else's: not ours to delete
                raise KubeError("conflict", f"DeviceTaintRule {rule.name} is no longer ours")
            uid = existing.body.get("metadata", {}).get("uid", "")
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": uid} if uid else {},
            }
            reply = self.client.request("DELETE", path, options)
            if reply.status != 404:
                self._check(reply, "delete")
            self._log.info("device taint removed", uuid=uuid, rule=rule.name)
        with self._lock:
            self._rules.pop(uuid, None)

    @staticmethod
    def _check(reply: Reply, what: str) -> None:
        if not 200 <= reply.status < 300:
            message = str(reply.body.get("message", ""))[:300]
            raise KubeError(f"http_{reply.status}", f"{what}: HTTP {reply.status} {message}")

    # -- the Node condition ----------------------------------------------------------

    def _write_condition(
        self, devices: dict[str, DeviceVerdict], bad: dict[str, DeviceVerdict], now: float
    ) -> None:
        if bad:
            status, reason = "False", "AcceleratorUnhealthy"
            message = "; ".join(
                f"{d.device or '?'} ({uuid}) "
                + (d.state if self._is_bad(d) or d.state == "unknown" else "recovering")
                + (f": {','.join(d.reasons)}" if d.reasons else "")
                + (f" -> {d.action}" if d.action and d.action != "none" else "")
                for uuid, d in sorted(bad.items())
            )
        elif devices:
            status, reason = "True", "AcceleratorsHealthy"
            message = f"{len(devices)} accelerators healthy"
        else:
            status, reason, message = "Unknown", "NoHealthData", "no fresh device health"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        if self._condition is None or self._condition[0] != status:
            self._condition = (status, now)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._condition[1]))
        condition = {
            "type": CONDITION,
            "status": status,
            "reason": reason,
            "message": message[:1024],
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": since,
        }
        patch = {"status": {"conditions": [condition]}}
        path = f"/api/v1/nodes/{self.node}/status"
        self._check(self.client.request("PATCH", path, patch, STRATEGIC_PATCH), "node status")


TAINT_KEYS = ("key", "value", "effect")
