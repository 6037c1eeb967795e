"""The Kubernetes health writer against the fake API server (HTTPS, objects validated
against Kubernetes 1.36's OpenAPI schema): DeviceTaintRules with no effect first, the
configured effect after, removal with hysteresis, its own Node's condition only, and
no harm when the API server refuses, hangs or holds objects that are not ours.

Restarts, drift, lies and the quiet cost: tests/integration/test_kube_health_restarts.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.config.outputs import KubernetesOutputConfig, OutputsConfig
from exporter.config.root import Config
from exporter.outputs.kube_health import KubeHealthWriter
from exporter.outputs.kube_rules import HEALTHY_SINCE, RULES_PATH, rfc3339, rule_name
from exporter.outputs.registry import build_outputs
from exporter.store import Store
from tests.fakes.kube_api import FakeApiServer, node
from tests.fakes.resource_slices import amd_gpu, resource_slice
from tests.helpers.kube_writer import (
    NODE,
    TOKEN,
    Clock,
    condition,
    device_info,
    nvidia_slices,
    publish,
    rule_requests,
    verdict,
    writer,
)
from tests.helpers.pki import make_pki

OTHER = "gpu-node-b"
G0, G1, G2 = "GPU-00000000-aaaa", "GPU-11111111-bbbb", "GPU-22222222-cccc"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def api(pki: Path) -> Any:
    with FakeApiServer(pki, token=TOKEN) as server:
        server.nodes = {NODE: node(NODE), OTHER: node(OTHER)}
        server.slices = nvidia_slices([G0, G1])  # G2: published by no slice
        yield server


def test_taint_rule_lifecycle_and_node_condition(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoExecute", clear_after=300.0)
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    w.reconcile()
    assert api.rules == {}
    assert condition(api)["status"] == "True" and condition(api)["reason"] == "AcceleratorsHealthy"
    assert api.slice_listings == []  # nothing bad: no ResourceSlice listing either

    publish(
        store,
        verdict("0", G0, "ok"),
        verdict("1", G1, "failed", "xid_79", action="reboot_node"),
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
    assert rule["metadata"]["annotations"]["accel-exporter.io/reasons"] == "xid_79"
    cond = condition(api)
    assert (cond["status"], cond["reason"]) == ("False", "AcceleratorUnhealthy")
    assert f"1 ({G1}) failed: xid_79 -> reboot_node" in cond["message"]
    assert api.invalid == []  # every object validated against the 1.36 schema

    clock.now += 30
    w.reconcile()  # the next pass: the configured effect
    assert api.rules[name]["spec"]["taint"]["effect"] == "NoExecute"
    patches = [r for r in rule_requests(api, "PATCH") if "spec" in r["body"]]
    assert [p["body"]["spec"]["taint"]["effect"] for p in patches] == ["NoExecute"]

    # Healthy again: the clock starts on the rule, which stays until clear_after has passed.
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    clock.now += 30
    w.reconcile()
    started = clock.now
    notes = api.rules[name]["metadata"]["annotations"]
    assert notes[HEALTHY_SINCE] == rfc3339(started)
    assert api.rules[name]["spec"]["taint"]["effect"] == "NoExecute"
    assert condition(api)["status"] == "False" and "recovering" in condition(api)["message"]
    assert w.status()["held"] == {G1: "recovering"}
    assert w.status()["rules"][G1]["healthy_since"] == rfc3339(started)
    clock.now += 299
    w.reconcile()
    assert name in api.rules
    clock.now += 2
    w.reconcile()
    assert api.rules == {}
    (delete,) = rule_requests(api, "DELETE")
    assert delete["body"]["preconditions"] == {"uid": rule["metadata"]["uid"]}
    cond = condition(api)
    assert cond["status"] == "True" and cond["lastTransitionTime"] == rfc3339(clock.now)
    # Only this node's status was ever written.
    nodes = {r["path"] for r in api.requests if r["path"].startswith("/api/v1/nodes/")}
    assert nodes == {f"/api/v1/nodes/{NODE}/status"}
    assert api.nodes[OTHER]["status"]["conditions"] == []
    status = w.status()
    assert status["failures"] == {} and status["rules"] == {} and status["held"] == {}
    assert api.slice_listings == [["gpu-0", "gpu-1"]]  # listed once, when G1 needed it


def test_no_effect_is_ever_set_unless_configured(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)  # taint_effect: None (the default)
    publish(store, verdict("0", G0, "failed", "row_remap_failure", action="service"))
    for _ in range(3):
        clock.now += 30
        w.reconcile()
    assert api.rules[rule_name(NODE, G0)]["spec"]["taint"]["effect"] == "None"
    assert not rule_requests(api, "PATCH")


def test_unknown_keeps_the_taint_and_an_unresolved_device_is_listed(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, clear_after=0.0)
    publish(store, verdict("0", G0, "failed", "xid_48"), verdict("2", G2, "failed"))
    w.reconcile()
    assert list(api.rules) == [rule_name(NODE, G0)]
    assert w.status()["unresolved_devices"] == [G2]  # no ResourceSlice publishes it
    publish(store)  # the source answered no verdict: no fresh data is no recovery
    clock.now += 600
    w.reconcile()
    assert list(api.rules) == [rule_name(NODE, G0)]
    assert condition(api)["status"] == "False"
    assert w.status()["held"] == {G0: "unknown"}


def test_an_unresolved_device_is_looked_up_again_only_every_few_minutes(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    publish(store, verdict("2", G2, "failed", "xid_79"))
    for _ in range(8):  # 4 minutes of passes
        w.reconcile()
        clock.now += 30
    assert len(api.slice_listings) == 2  # at 0 s and at 120 s
    assert w.status()["unresolved_devices"] == [G2] and api.rules == {}
    api.slices = nvidia_slices([G0, G1, G2])  # the driver published it late
    for _ in range(4):
        w.reconcile()
        clock.now += 30
    assert rule_name(NODE, G2) in api.rules and w.status()["unresolved_devices"] == []


def test_a_device_named_by_its_pci_address_alone_is_resolved(api, pki, tmp_path):
    """AMD's DRA driver publishes no uuid: the device source's PCI address finds it."""
    store, clock = Store(), Clock()
    amd = "a1b2c3d4-amd"
    api.slices = [resource_slice(NODE, "gpu.amd.com", [amd_gpu(0, "0000:c1:00.0")])]
    w = writer(api, pki, tmp_path, store, clock)
    publish(
        store,
        verdict("0", amd, "failed", "afid_30"),
        readings=(device_info("0", amd, "00000000:C1:00.0"),),
    )
    w.reconcile()
    rule = api.rules[rule_name(NODE, amd)]
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.amd.com",
        "pool": NODE,
        "device": "gpu-0-128",
    }


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
    publish(store, verdict("0", G0, "failed", "xid_95"))
    w.reconcile()  # its name is taken by someone else's rule: a counted conflict
    assert w.status()["failures"] == {"conflict": 1} and w.status()["rules"] == {}
    publish(store, verdict("0", G0, "ok"))
    clock.now += 30
    w.reconcile()
    assert api.rules[theirs]["metadata"]["labels"] == {"team": "sre"}
    assert not rule_requests(api, "DELETE", "PATCH")


def test_a_rule_left_by_an_earlier_run_is_adopted_and_cleared(api, pki, tmp_path):
    store, clock = Store(), Clock()
    publish(store, verdict("1", G1, "failed", "xid_79", action="reboot_node"))
    first = writer(api, pki, tmp_path, store, clock)
    first.reconcile()
    publish(store, verdict("1", G1, "ok"))
    second = writer(api, pki, tmp_path, store, clock, clear_after=0.0)  # a restarted daemon
    clock.now += 30
    second.reconcile()
    assert api.rules == {}


@pytest.mark.parametrize("refusal", [403, 500])
def test_refusals_are_counted_and_retried(api, pki, tmp_path, refusal):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    publish(store, verdict("0", G0, "failed", "xid_79"))
    api.status = refusal
    w.reconcile()
    w.reconcile()
    status = w.status()
    # Each pass: the rules step (its list) and the condition step (the node's read).
    assert status["failures"] == {f"http_{refusal}": 4} and status["last_success"] is None
    assert f"HTTP {refusal}" in status["last_error"]
    api.status = None
    w.reconcile()
    assert rule_name(NODE, G0) in api.rules and w.status()["last_success"] == clock.now


def test_a_hung_api_server_costs_one_timeout_per_step_and_is_counted(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, timeout=0.3)
    publish(store, verdict("0", G0, "ok"))
    api.delay = 1.0
    w.reconcile()
    assert w.status()["failures"] == {"timeout": 2}
    api.delay = 0.0
    # The server answers again; a pass on a loaded machine may still miss the short
    # deadline (TLS set-up alone), and the writer's answer to that is the next pass.
    for _ in range(20):
        w.reconcile()
        if condition(api) is not None:
            break
    assert condition(api)["status"] == "True"


def test_the_thread_keeps_running_through_failures_and_stop_joins_it(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, interval=0.1)
    publish(store, verdict("0", G0, "ok"))
    api.status = 403
    asyncio.run(w.start())

    def failures() -> int:
        return sum(w.status()["failures"].values())

    deadline = time.monotonic() + 20
    while failures() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert failures() >= 3  # kept retrying, never raised
    api.status = None
    while condition(api) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert condition(api)["status"] == "True"
    asyncio.run(w.stop(1.0))
    assert w._thread is not None and not w._thread.is_alive()  # joined by stop()


def test_stop_returns_within_the_request_deadline_while_the_server_hangs(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, timeout=0.5, interval=0.1)
    publish(store, verdict("0", G0, "ok"))
    api.delay = 8.0  # every request outlives its deadline many times over
    asyncio.run(w.start())
    while not api.requests:
        time.sleep(0.02)
    started = time.monotonic()
    asyncio.run(w.stop(0.1))
    took = time.monotonic() - started
    assert w._thread is not None and not w._thread.is_alive()
    assert took < api.delay / 2  # the request's deadline and the margin, not the server
    seen = len(api.requests)
    time.sleep(0.3)
    assert len(api.requests) == seen  # no request after stop


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


def test_the_daemon_builds_one_writer_that_resolves_devices_itself():
    config = Config(outputs=OutputsConfig(kubernetes=KubernetesOutputConfig(enabled=True)))
    (built,) = build_outputs(config, Store())
    assert isinstance(built, KubeHealthWriter)
    assert build_outputs(Config(), Store()) == []  # off by default


def test_heartbeat_is_checked_against_the_interval_and_5_minutes():
    assert KubernetesOutputConfig(heartbeat=300.0).check() == []
    assert KubernetesOutputConfig(interval=30.0, heartbeat=30.0).check() == []
    for bad in (
        KubernetesOutputConfig(heartbeat=301.0),
        KubernetesOutputConfig(interval=60.0, heartbeat=30.0),
    ):
        assert [key for key, _ in bad.check()] == ["heartbeat"]
