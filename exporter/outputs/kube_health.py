"""The health verdict written to Kubernetes: DeviceTaintRules and a Node condition.

Opt-in (``outputs.kubernetes.enabled``). Every ``interval`` it reads this node's
verdicts from the store (``View.health()``: only fresh ones are there; a device
whose source is down, stale or not polled yet has none and is *unknown*) and
reconciles two things, each in its own step, so a failing one never skips the other:

- **rules** (:mod:`exporter.outputs.kube_rules`): one list of this node's rules by
  label, compared with the verdicts and with what the writer holds each rule to be;
  missing rules of bad devices are created (effect ``None`` first), drift is
  repaired, the healthy-since clock is kept on the object, a rule is deleted (with
  the listed uid as precondition) once fresh not-bad data has held ``clear_after``.
  Every rule found at start is held: a restart with no data yet changes nothing.
  A rule covers the whole scope of a bad device's action (``scope_uuids``): one
  pool-wide rule where the scope is exactly a pool of the node's slices, else one
  rule per device of the scope (:mod:`exporter.outputs.kube_scope`).
  With nothing held and nothing bad the list is asked only every
  :data:`QUIET_LIST_SECONDS`. Devices are resolved from this node's ResourceSlices
  (:mod:`exporter.outputs.kube_devices`);
- **the Node condition** (:mod:`exporter.outputs.kube_condition`) of this node only,
  read once at start, patched on change and as a heartbeat.

Every reply is checked (kind, name, the taint or condition sent): anything else is
a failure ``bad_reply``, and nothing is believed written. It never raises into the
daemon: failures are counted by reason in /status and the next pass tries again. It
runs on its own thread; every request has one deadline, and ``stop()`` joins the
thread (bounded by that deadline and a margin). A reload that leaves the config as it
was keeps the writer; a replaced one hands its holds and counts to the next
(:meth:`KubeHealthWriter.adopt`).

The requests and the rule writes, with their reply checks, are
:mod:`exporter.outputs.kube_rule_writes`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from exporter import log
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.outputs import KubernetesOutputConfig
from exporter.enrich.devices import DeviceIndex
from exporter.family_names import ACCEL_DEVICE_INFO
from exporter.kube import KubeClient, KubeError, list_resource_slices
from exporter.outputs.base import ended
from exporter.outputs.kube_condition import (
    CONDITION,
    STRATEGIC_PATCH,
    Written,
    carried,
    patch_body,
    wanted,
    written,
)
from exporter.outputs.kube_devices import DeviceRefs
from exporter.outputs.kube_rule_writes import RuleWrites, Stopped, bad_reply, expect
from exporter.outputs.kube_rules import (
    BAD,
    RECOVERING,
    RULES_PATH,
    UNKNOWN,
    Create,
    Intent,
    Listed,
    Patch,
    Settings,
    is_bad,
    is_ours,
    our_labels,
    plan,
    rfc3339,
    selector_query,
    standing,
)

# The label value of an action, named here as the writer's tests name it.
from exporter.outputs.kube_rules import label_value as label_value
from exporter.outputs.kube_scope import Targets, reach, targets
from exporter.store import Store
from exporter.verdict import DeviceHealth

# With no rule held and no device bad, the rules are listed this seldom: a quiet node
# costs the API server a handful of requests an hour (a rule made by hand with our
# labels, or one an earlier run left behind and the first list missed, is found then).
QUIET_LIST_SECONDS = 1800.0
# stop() waits for the request in flight (its deadline) and this much more.
JOIN_MARGIN_SECONDS = 1.0


def access(
    config: KubernetesOutputConfig, kube: KubernetesConfig, env: Mapping[str, str]
) -> tuple[str, KubeClient]:
    """The node's name and the API client: the one place the writer's access is built."""
    client = KubeClient.from_config(kube, config.timeout, env=env)
    return client.node, client


class KubeHealthWriter(RuleWrites):
    """The ``outputs.kubernetes`` writer; see the module docstring."""

    name = "kubernetes"

    def __init__(
        self,
        config: KubernetesOutputConfig,
        store: Store,
        *,
        kube: KubernetesConfig | None = None,
        env: Mapping[str, str] = os.environ,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.kube = kube if kube is not None else KubernetesConfig()
        self.store = store
        self.wall = wall
        self.node, self.client = access(config, self.kube, env)
        self._labels = our_labels(self.node)
        self._settings = Settings(
            config.taint_key, config.taint_effect, config.taint_degraded, config.clear_after
        )
        # What this writer holds each rule to be (only rules the server listed or
        # answered for: never one a reply did not confirm).
        self._intents: dict[str, Intent] = {}  # rule key (uuid or pool key) -> intent
        self._held: dict[str, str] = {}  # culprit uuid -> recovering / unknown (rules kept)
        self._clocks: dict[str, float] = {}  # rule key -> healthy-since on its rule
        self._next_list = 0.0  # the first pass lists: adoption
        self._devices = DeviceRefs()
        self._unresolved: list[str] = []
        # Bad devices without a rule (unresolved, or taint_rules off): when each was
        # first seen healthy again (None while bad), for the Node condition's hysteresis.
        self._recovering: dict[str, float | None] = {}
        self._node_read = False
        self._written: Written | None = None
        self._failures: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._last_error = ""
        self._last_success: float | None = None
        self._reconciles = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.get(output="kubernetes", node=self.node)

    # -- the Output protocol ---------------------------------------------------------

    def fingerprint(self) -> tuple[Any, ...]:
        """What it was built from: a reload building an equal one keeps this one running.

        The config and the ``kubernetes`` access section, and the node and API server it
        resolved. Plain values: a client object compares by identity.
        """
        return (type(self), self.config, self.kube, self.node, self.client.url)

    def adopt(self, old: object) -> None:
        """Take over what the stopped writer this one replaces kept.

        Its counts always; for the same API server and node also its holds, clocks,
        the ResourceSlice listing and the condition it wrote.
        """
        if not isinstance(old, KubeHealthWriter):
            return
        with old._lock:
            self._failures.update(old._failures)
            self._requests.update(old._requests)
            self._reconciles = old._reconciles
            self._last_error, self._last_success = old._last_error, old._last_success
            if (old.client.url, old.node) != (self.client.url, self.node):
                return
            self._intents = dict(old._intents)
            self._held, self._clocks = dict(old._held), dict(old._clocks)
            self._recovering = dict(old._recovering)
            self._node_read, self._written = old._node_read, old._written
            self._devices = old._devices

    async def start(self) -> None:
        """Start the reconcile thread."""
        self._thread = threading.Thread(target=self._run, name="kube-health", daemon=True)
        self._thread.start()

    def stop_seconds(self, deadline: float) -> float:
        """The longest :meth:`stop` takes: the request in flight, and a margin."""
        return self.config.timeout + JOIN_MARGIN_SECONDS

    async def stop(self, deadline: float) -> None:
        """End the thread and join it; ``deadline`` does not apply (nothing to flush).

        No request starts after this; the one in flight ends at its own deadline.
        """
        self._stop.set()
        if not await ended(self._thread, self.stop_seconds(deadline)):
            self._log.warning("writer thread did not end", waited=self.stop_seconds(deadline))

    def status(self) -> dict[str, Any]:
        """Rules, holds, condition and failures for /status."""
        with self._lock:
            written_now = self._written
            return {
                "node": self.node,
                "api_server": self.client.url,
                "rules": {
                    key: {
                        "name": intent.name,
                        **intent.taint.as_dict(),
                        "selector": intent.selector.as_dict(),
                        "culprits": list(intent.culprits),
                        "healthy_since": rfc3339(self._clocks[key])
                        if key in self._clocks
                        else None,
                    }
                    for key, intent in sorted(self._intents.items())
                },
                "held": dict(sorted(self._held.items())),
                "unresolved_devices": list(self._unresolved),
                "resource_slices": self._devices.status(),
                "condition": written_now.condition.status if written_now else None,
                "condition_reason": written_now.condition.reason if written_now else None,
                "failures": dict(self._failures),
                "last_error": self._last_error,
                "last_success": self._last_success,
                "reconciles": self._reconciles,
                "requests": dict(self._requests),
            }

    def _run(self) -> None:
        while not self._stop.is_set():
            self.reconcile()
            self._stop.wait(self.config.interval)

    # -- one reconciliation ----------------------------------------------------------

    def reconcile(self) -> None:
        """Bring the rules and the condition in line with the verdicts; never raises."""
        now = self.wall()
        with self._lock:
            self._reconciles += 1
        if not self.client.url or not self.node:
            self._fail(
                "not_configured", "no API server (KUBERNETES_SERVICE_HOST) or node name (NODE_NAME)"
            )
            return
        try:
            health = dict(self.store.view().health())
        except Exception as exc:  # the store never raises; if it did, nothing is known
            self._fail("internal", repr(exc))
            return
        clean = True
        if self.config.taint_rules:
            clean = self._step(lambda: self._rules(health, now)) and clean
        held = {**self._without_rule(health, now), **self._held}
        if self.config.node_condition:
            clean = self._step(lambda: self._condition(health, held, now)) and clean
        if clean:
            with self._lock:
                self._last_success = now

    def _step(self, run: Callable[[], bool]) -> bool:
        """Run one step; its failures counted. True when it ended without one."""
        try:
            return run()
        except Stopped:
            return False
        except KubeError as exc:
            self._fail(exc.reason, exc.detail)
        except Exception as exc:  # never into the daemon: counted, logged, retried
            self._fail("internal", repr(exc))
        return False

    def _fail(self, reason: str, detail: str) -> None:
        with self._lock:
            self._failures[reason] += 1
            first = self._last_error != detail
            self._last_error = detail
        if first:  # logged once per distinct problem, not every interval
            self._log.warning("kubernetes write failed", reason=reason, detail=detail)

    # -- DeviceTaintRules ------------------------------------------------------------

    def _rules(self, health: dict[str, DeviceHealth], now: float) -> bool:
        degraded = self.config.taint_degraded
        bad = {u: d for u, d in health.items() if is_bad(d, degraded)}
        if not self._intents and not bad and now < self._next_list:
            return True  # quiet: nothing held, nothing bad, listed not long ago
        listed = self._list()
        self._next_list = now + QUIET_LIST_SECONDS if not listed and not bad else now
        clean = True
        try:
            found = self._targets(bad, now)
        except KubeError as exc:  # counted; what the last listing named still goes
            self._fail(exc.reason, exc.detail)
            clean = False
            found = self._targets(bad, now, listing=False)
        pending = frozenset(found.unresolved)
        step = plan(listed, self._intents, health, found.wants, self._settings, now, pending)
        with self._lock:
            self._intents = step.intents
            self._held, self._clocks = step.held, step.clocks
            self._unresolved = sorted({u for miss in found.unresolved.values() for u in miss})
        for item in step.steps:
            try:
                if isinstance(item, Create):
                    self._create(item)
                elif isinstance(item, Patch):
                    self._patch(item)
                else:
                    self._delete(item)
            except KubeError as exc:  # one rule's failure is not the others'
                self._fail(exc.reason, exc.detail)
                clean = False
        return clean

    def _list(self) -> dict[str, Listed]:
        """The rules of this node, listed by label, by key (device uuid or pool key)."""
        path = f"{RULES_PATH}?labelSelector={quote(selector_query(self._labels))}"
        body = expect(self._request("GET", path), "DeviceTaintRuleList")
        items = body.get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise bad_reply("DeviceTaintRuleList without an items list")
        found = [Listed.of(item) for item in items if is_ours(item, self._labels)]
        out: dict[str, Listed] = {}
        # Two rules naming one device (made by hand): the first by name is the one held.
        for rule in sorted((r for r in found if r is not None), key=lambda r: r.name):
            out.setdefault(rule.key, rule)
        return out

    def _targets(
        self, bad: Mapping[str, DeviceHealth], now: float, listing: bool = True
    ) -> Targets:
        """The rules the scopes of ``bad`` ask for, their devices resolved from the slices.

        Lists the node's ResourceSlices when a device of a scope is not in the last
        listing (and a listing is due); ``listing`` False looks up the last one only.
        """
        if not bad:
            return Targets()
        uuids = sorted({u for dev in bad.values() for u in reach(dev)})
        view = self.store.view()
        index = DeviceIndex.from_readings(view.readings(ACCEL_DEVICE_INFO))
        pci = {}
        for uuid in uuids:
            ref = index.by_uuid(uuid)
            if ref is not None and ref.pci_bus_id:
                pci[uuid] = ref.pci_bus_id
        if listing:
            refs = self._devices.resolve(uuids, pci, now, self._list_slices)
        else:
            refs = self._devices.lookup(uuids, pci)
        return targets(bad, refs, self._devices.pools())

    def _list_slices(self) -> list[Any]:
        """The node's ResourceSlices, through the one listing every consumer uses."""
        if self._stop.is_set():
            raise Stopped
        with self._lock:
            self._requests["GET"] += 1
        return list_resource_slices(self.client, self.node)

    # -- the Node condition ----------------------------------------------------------

    def _without_rule(self, health: Mapping[str, DeviceHealth], now: float) -> dict[str, str]:
        """Holds of bad devices that have no rule (the condition's hysteresis only)."""
        degraded = self.config.taint_degraded
        ruled = {c for intent in self._intents.values() for c in intent.culprits}
        for uuid, dev in health.items():
            where = standing(dev, degraded)
            if uuid in ruled:
                self._recovering.pop(uuid, None)
            elif where == BAD:
                self._recovering[uuid] = None
            elif where == RECOVERING and uuid in self._recovering:
                since = self._recovering[uuid]
                since = now if since is None else since
                self._recovering[uuid] = since
                if now - since >= self.config.clear_after:
                    del self._recovering[uuid]
        return {
            uuid: RECOVERING if standing(health.get(uuid), degraded) == RECOVERING else UNKNOWN
            for uuid, since in self._recovering.items()
            if standing(health.get(uuid), degraded) != BAD
        }

    def _condition(
        self, health: Mapping[str, DeviceHealth], held: dict[str, str], now: float
    ) -> bool:
        path = f"/api/v1/nodes/{self.node}/status"
        if not self._node_read:  # what the node carries, before we say anything
            node = expect(self._request("GET", path), "Node", self.node)
            with self._lock:
                self._written, self._node_read = carried(node), True
        before = self._written
        want = wanted(health, held, before, self.config.taint_degraded)
        if want is None or (
            before is not None and not before.due(want, now, self.config.heartbeat)
        ):
            return True
        body = patch_body(want, before, now)
        answer = carried(
            expect(self._request("PATCH", path, body, STRATEGIC_PATCH), "Node", self.node)
        )
        if answer is None or answer.condition.status != want.status:
            raise bad_reply(f"node status: the reply does not carry {CONDITION}={want.status}")
        with self._lock:
            self._written = written(body, now)
        if before is None or before.condition.status != want.status:
            self._log.info(
                "node condition set",
                condition=CONDITION,
                status=want.status,
                reason=want.reason,
                message=want.message[:200],
            )
        return True
