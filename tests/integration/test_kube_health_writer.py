"""The Kubernetes health writer against the fake API server (HTTPS, objects validated
against Kubernetes 1.36's OpenAPI schema): DeviceTaintRules with no effect first, the
configured effect after, removal with hysteresis, its own Node's condition only, and
no harm when the API server refuses, hangs or holds objects that are not ours."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.config.kubernetes import KubernetesConfig
from exporter.config.outputs import KubernetesOutputConfig
from exporter.model import Reading
from exporter.outputs.kube_health import RULES_PATH, KubeHealthWriter, rule_name
from exporter.store import Store
from tests.fakes.kube_api import FakeApiServer, node
from tests.helpers.pki import make_pki

NODE, OTHER = "gpu-node-a", "gpu-node-b"
G0, G1, G2 = "GPU-00000000-aaaa", "GPU-11111111-bbbb", "GPU-22222222-cccc"


@dataclasses.dataclass(frozen=True)
class Ref:
    driver: str
    pool: str
    device: str


# What the node's ResourceSlices say (the resolver k8s25's DraIndex.by_uuid provides).
SLICES = {
    G0: Ref("gpu.nvidia.com", NODE, "gpu-0"),
    G1: Ref("gpu.nvidia.com", NODE, "gpu-1"),
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def api(pki: Path) -> Any:
    with FakeApiServer(pki, token="t0ken") as server:
        server.nodes = {NODE: node(NODE), OTHER: node(OTHER)}
        yield server


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def health(device: str, uuid: str, state: str, *reasons: str, action: str = "none") -> list:
    ident = (device, uuid)
    out = [
        Reading("accel_device_health", (*ident, s), 1.0 if s == state else 0.0)
        for s in ("ok", "degraded", "failed", "predicted_failure")
    ]
    out += [Reading("accel_device_health_reason_info", (*ident, r), 1.0) for r in reasons]
    out.append(Reading("accel_device_recommended_action", (*ident, action), 1.0))
    return out


def writer(api: Any, pki: Path, tmp_path: Path, store: Store, clock: Clock, **kw: Any):
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    config = KubernetesOutputConfig(enabled=True, timeout=kw.pop("timeout", 5.0), **kw)
    kube = KubernetesConfig(
        api_server=api.url, node_name=NODE, token_file=str(token), ca_file=str(pki / "ca.pem")
    )
    return KubeHealthWriter(config, store, kube=kube, resolver=SLICES.get, wall=clock)


def condition(api: Any, name: str = NODE) -> dict[str, Any]:
    (found,) = [
        c for c in api.nodes[name]["status"]["conditions"] if c["type"] == "AcceleratorHealthy"
    ]
    return found


def test_taint_rule_lifecycle_and_node_condition(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoExecute", clear_after=300.0)
    store.publish("nvml", health("0", G0, "ok") + health("1", G1, "ok"))
    w.reconcile()
    assert api.rules == {}
    assert condition(api)["status"] == "True" and condition(api)["reason"] == "AcceleratorsHealthy"

    store.publish(
        "nvml",
        health("0", G0, "ok") + health("1", G1, "failed", "xid_79", action="reboot_node"),
    )
    clock.now += 30
    w.reconcile()
    name = rule_name(NODE, G1)
    rule = api.rules[name]
    # Created with no effect: it only reports what it would do.
    assert rule["apiVersion"] == "resource.k8s.io/v1beta2" and rule["kind"] == "DeviceTaintRule"
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com",
        "pool": NODE,
        "device": "gpu-1",
    }
    assert rule["spec"]["taint"] == {
        "key": "accel-exporter.io/unhealthy",
        "value": "reboot_node",
        "effect": "None",
    }
    assert rule["metadata"]["annotations"]["accel-exporter.io/device-uuid"] == G1
    cond = condition(api)
    assert (cond["status"], cond["reason"]) == ("False", "AcceleratorUnhealthy")
    assert f"1 ({G1}) failed: xid_79 -> reboot_node" in cond["message"]
    assert api.invalid == []  # every object validated against the 1.36 schema

    clock.now += 30
    w.reconcile()  # the next pass: the configured effect
    assert api.rules[name]["spec"]["taint"]["effect"] == "NoExecute"
    patches = [
        r for r in api.requests if r["method"] == "PATCH" and r["path"].startswith(RULES_PATH)
    ]
    assert [p["body"]["spec"]["taint"]["effect"] for p in patches] == ["NoExecute"]

    # Healthy again: the rule stays until clear_after has passed, then goes.
    store.publish("nvml", health("0", G0, "ok") + health("1", G1, "ok"))
    clock.now += 30
    w.reconcile()
    assert name in api.rules and condition(api)["status"] == "False"
    assert "recovering" in condition(api)["message"]
    clock.now += 299
    w.reconcile()
    assert name in api.rules
    clock.now += 2
    w.reconcile()
    assert api.rules == {}
    cond = condition(api)
    assert cond["status"] == "True" and cond["lastTransitionTime"] == time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.now)
    )
    # Only this node's status was ever written.
    nodes = {r["path"] for r in api.requests if r["path"].startswith("/api/v1/nodes/")}
    assert nodes == {f"/api/v1/nodes/{NODE}/status"}
    assert api.nodes[OTHER]["status"]["conditions"] == []
    assert w.status()["failures"] == {}


def test_no_effect_is_ever_set_unless_configured(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)  # taint_effect: None (the default)
    store.publish("nvml", health("0", G0, "failed", "row_remap_failure", action="service"))
    for _ in range(3):
        clock.now += 30
        w.reconcile()
    assert api.rules[rule_name(NODE, G0)]["spec"]["taint"]["effect"] == "None"
    assert not [r for r in api.requests if r["method"] == "PATCH" and "devicetaint" in r["path"]]


def test_unknown_keeps_the_taint_and_an_unresolved_device_is_listed(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, clear_after=0.0)
    store.publish("nvml", health("0", G0, "failed", "xid_48") + health("2", G2, "failed"))
    w.reconcile()
    assert list(api.rules) == [rule_name(NODE, G0)]
    assert w.status()["unresolved_devices"] == [G2]  # no ResourceSlice publishes it
    store.publish("nvml", [])  # the source went stale: no fresh data is no recovery
    clock.now += 600
    w.reconcile()
    assert list(api.rules) == [rule_name(NODE, G0)]
    assert condition(api)["status"] == "False"


def test_never_deletes_or_changes_what_it_did_not_create(api, pki, tmp_path):
    store, clock = Store(), Clock()
    theirs = rule_name(NODE, G0)
    api.rules[theirs] = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": theirs, "uid": "uid-theirs", "labels": {"team": "sre"}},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"},
            "taint": {"key": "sre/broken", "effect": "NoSchedule"},
        },
    }
    w = writer(api, pki, tmp_path, store, clock, clear_after=0.0)
    store.publish("nvml", health("0", G0, "failed", "xid_95"))
    w.reconcile()  # its name is taken by someone else's rule: a counted conflict
    assert w.status()["failures"] == {"conflict": 1}
    store.publish("nvml", health("0", G0, "ok"))
    clock.now += 30
    w.reconcile()
    assert api.rules[theirs]["metadata"]["labels"] == {"team": "sre"}
    assert not [
        r for r in api.requests if r["method"] in ("DELETE", "PATCH") and "devicetaint" in r["path"]
    ]


def test_a_rule_left_by_an_earlier_run_is_adopted_and_cleared(api, pki, tmp_path):
    store, clock = Store(), Clock()
    store.publish("nvml", health("1", G1, "failed", "xid_79", action="reboot_node"))
    first = writer(api, pki, tmp_path, store, clock)
    first.reconcile()
    store.publish("nvml", health("1", G1, "ok"))
    second = writer(api, pki, tmp_path, store, clock, clear_after=0.0)  # a restarted daemon
    clock.now += 30
    second.reconcile()
    second.reconcile()
    assert api.rules == {}


@pytest.mark.parametrize("refusal", [403, 500])
def test_refusals_are_counted_and_retried(api, pki, tmp_path, refusal):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    store.publish("nvml", health("0", G0, "failed", "xid_79"))
    api.status = refusal
    w.reconcile()
    w.reconcile()
    status = w.status()
    assert status["failures"] == {f"http_{refusal}": 2} and status["last_success"] is None
    assert f"HTTP {refusal}" in status["last_error"]
    api.status = None
    w.reconcile()
    assert rule_name(NODE, G0) in api.rules and w.status()["last_success"] == clock.now


def test_a_hung_api_server_costs_one_timeout_and_is_counted(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, timeout=0.3)
    store.publish("nvml", health("0", G0, "ok"))
    api.delay = 1.0
    w.reconcile()
    assert w.status()["failures"] == {"timeout": 1}
    api.delay = 0.0
    w.reconcile()
    assert condition(api)["status"] == "True"


def test_the_thread_keeps_running_through_failures_and_stops(api, pki, tmp_path):
    import asyncio

    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, interval=0.1)
    store.publish("nvml", health("0", G0, "ok"))
    api.status = 403
    asyncio.run(w.start())

    def failures() -> int:
        return sum(w.status()["failures"].values())

    deadline = time.monotonic() + 20
    while failures() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert failures() >= 3  # kept retrying, never raised
    api.status = None
    while condition_or_none(api) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert condition_or_none(api) == "True"
    asyncio.run(w.stop(1.0))
    w._thread.join(5)
    assert not w._thread.is_alive()


def condition_or_none(api: Any) -> str | None:
    found = [
        c for c in api.nodes[NODE]["status"]["conditions"] if c["type"] == "AcceleratorHealthy"
    ]
    return found[0]["status"] if found else None


def test_the_fake_refuses_what_the_real_schema_refuses(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    bad = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "x"},
        "spec": {"taint": {"key": "k", "effect": "None", "colour": "red"}},
    }
    assert w.client.request("POST", RULES_PATH, bad).status == 422
    assert api.invalid and api.rules == {}


def test_the_daemon_wires_a_sources_dra_lookup_as_the_resolver():
    from exporter.config.outputs import OutputsConfig
    from exporter.config.root import Config
    from exporter.outputs.registry import build_outputs

    class SliceSource:  # the source that lists this node's ResourceSlices offers this
        def dra_lookup(self, uuid: str) -> Ref | None:
            return SLICES.get(uuid)

    config = Config(outputs=OutputsConfig(kubernetes=KubernetesOutputConfig(enabled=True)))
    (with_slices,) = build_outputs(config, Store(), [object(), SliceSource()])
    assert isinstance(with_slices, KubeHealthWriter)
    assert with_slices.resolver is not None and with_slices.resolver(G1) == SLICES[G1]
    (without,) = build_outputs(config, Store(), [object()])
    assert isinstance(without, KubeHealthWriter) and without.resolver is None
    assert build_outputs(Config(), Store(), [SliceSource()]) == []  # off by default
