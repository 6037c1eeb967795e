"""The Kubernetes health writer across restarts and reloads, against drift and lies, and
what it costs the API server (the fake API server; a virtual clock)."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from exporter.outputs.kube_health import KubeHealthWriter
from exporter.outputs.kube_rules import HEALTHY_SINCE, RULES_PATH, rfc3339, rule_name
from exporter.store import Store
from tests.fakes.kube_api import FakeApiServer, node
from tests.helpers.kube_writer import (
    NODE,
    TOKEN,
    Clock,
    condition,
    node_patches,
    nvidia_slices,
    publish,
    rule_requests,
    verdict,
    writer,
)
from tests.helpers.pki import make_pki

G0, G1 = "GPU-00000000-aaaa", "GPU-11111111-bbbb"
NAME0, NAME1 = rule_name(NODE, G0), rule_name(NODE, G1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def api(pki: Path) -> Any:
    with FakeApiServer(pki, token=TOKEN) as server:
        server.nodes = {NODE: node(NODE)}
        server.slices = nvidia_slices([G0, G1])
        yield server


def failed_gpu_with_a_no_execute_rule(api, pki, tmp_path, clock) -> dict[str, Any]:
    """A first daemon's life: G1 failed with XID 79, its rule at NoExecute."""
    store = Store()
    publish(
        store, verdict("0", G0, "ok"), verdict("1", G1, "failed", "xid_79", action="reboot_node")
    )
    first = writer(api, pki, tmp_path, store, clock, taint_effect="NoExecute")
    for _ in range(2):
        first.reconcile()
        clock.now += 30
    assert api.rules[NAME1]["spec"]["taint"]["effect"] == "NoExecute"
    return dict(api.rules[NAME1])


def untouched(api, since: int, *, node_too: bool = True) -> bool:
    """No rule written (nor Node status patched) after the request numbered ``since``."""
    paths = (RULES_PATH, "/api/v1/nodes/") if node_too else (RULES_PATH,)
    later = api.requests[since:]
    return not [
        r
        for r in later
        if r["method"] in ("POST", "PATCH", "DELETE") and r["path"].startswith(paths)
    ]


# -- restarts ----------------------------------------------------------------------------


def test_review_h1_a_restart_before_the_first_poll_keeps_a_failed_gpu_s_taint(api, pki, tmp_path):
    """Review 4, H1: the restarted writer's first reconcile ran before any poll and
    deleted every rule it had adopted, NoExecute included."""
    clock = Clock()
    before = failed_gpu_with_a_no_execute_rule(api, pki, tmp_path, clock)
    restarted = writer(api, pki, tmp_path, Store(), clock, taint_effect="NoExecute")
    mark = len(api.requests)
    restarted.reconcile()  # a new daemon, nothing polled yet
    assert api.rules == {NAME1: before}
    assert untouched(api, mark)
    assert restarted.status()["held"] == {G1: "unknown"}
    assert restarted.status()["rules"][G1]["effect"] == "NoExecute"


def test_a_restart_neither_restarts_nor_skips_the_clock_and_never_lowers_the_effect(
    api, pki, tmp_path
):
    clock = Clock()
    failed_gpu_with_a_no_execute_rule(api, pki, tmp_path, clock)
    # Restarted, configured milder than the rule it finds: the rule is not lowered.
    store = Store()
    second = writer(api, pki, tmp_path, store, clock, taint_effect="None", clear_after=300.0)
    mark = len(api.requests)
    for _ in range(5):  # no data for 2.5 minutes
        second.reconcile()
        clock.now += 30
    assert untouched(api, mark) and api.rules[NAME1]["spec"]["taint"]["effect"] == "NoExecute"
    # Still failed, now seen: the adopted NoExecute stays (None is configured).
    publish(
        store, verdict("0", G0, "ok"), verdict("1", G1, "failed", "xid_79", action="reboot_node")
    )
    mark = len(api.requests)
    second.reconcile()
    assert api.rules[NAME1]["spec"]["taint"]["effect"] == "NoExecute"
    assert not [r for r in api.requests[mark:] if r["path"].startswith(RULES_PATH + "/")]
    # Healthy: the clock starts on the object.
    clock.now += 30
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    second.reconcile()
    started = clock.now
    assert api.rules[NAME1]["metadata"]["annotations"][HEALTHY_SINCE] == rfc3339(started)
    clock.now += 150
    second.reconcile()
    assert NAME1 in api.rules
    # A second restart midway: the clock goes on from the annotation.
    third_store = Store()
    third = writer(api, pki, tmp_path, third_store, clock, taint_effect="None", clear_after=300.0)
    third.reconcile()  # no data yet: nothing changes, the clock stays as written
    assert api.rules[NAME1]["metadata"]["annotations"][HEALTHY_SINCE] == rfc3339(started)
    publish(third_store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    clock.now = started + 299
    third.reconcile()
    assert NAME1 in api.rules
    assert api.rules[NAME1]["metadata"]["annotations"][HEALTHY_SINCE] == rfc3339(started)
    assert api.rules[NAME1]["spec"]["taint"]["effect"] == "NoExecute"
    clock.now = started + 300
    third.reconcile()
    assert api.rules == {}


def test_unknown_data_never_deletes_lowers_nor_moves_the_clock(api, pki, tmp_path):
    clock = Clock()
    failed_gpu_with_a_no_execute_rule(api, pki, tmp_path, clock)
    store = Store()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule", clear_after=60.0)
    publish(store, verdict("1", G1, "unknown", action="reboot_node", why="worker_down"))
    mark = len(api.requests)
    for _ in range(10):  # five minutes of "unknown", far past clear_after
        w.reconcile()
        clock.now += 30
    assert untouched(api, mark, node_too=False)
    assert condition(api)["status"] == "False"  # kept; its message names the unknown GPU
    rule = api.rules[NAME1]
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    assert HEALTHY_SINCE not in rule["metadata"]["annotations"]
    # Healthy for a moment, then unknown again: the clock is kept, not moved, no delete.
    publish(store, verdict("1", G1, "ok"))
    w.reconcile()
    started = clock.now
    publish(store, verdict("1", G1, "unknown", why="stale"))
    mark = len(api.requests)
    for _ in range(4):
        clock.now += 30
        w.reconcile()
    assert untouched(api, mark, node_too=False) and NAME1 in api.rules
    assert api.rules[NAME1]["metadata"]["annotations"][HEALTHY_SINCE] == rfc3339(started)
    # Fresh evidence that it failed again: the clock is removed.
    publish(store, verdict("1", G1, "failed", "xid_79", action="reboot_node"))
    w.reconcile()
    assert HEALTHY_SINCE not in api.rules[NAME1]["metadata"]["annotations"]
    assert api.rules[NAME1]["spec"]["taint"]["effect"] == "NoExecute"


def test_a_replaced_writer_hands_on_its_holds_and_counts(api, pki, tmp_path):
    clock = Clock()
    store = Store()
    publish(store, verdict("1", G1, "failed", "xid_79"))
    old = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule")
    api.status = 500
    old.reconcile()
    api.status = None
    old.reconcile()
    clock.now += 30
    old.reconcile()
    assert api.rules[NAME1]["spec"]["taint"]["effect"] == "NoSchedule"
    # A reload changing the effect builds a new writer: it takes over from the old one.
    new = writer(api, pki, tmp_path, store, clock, taint_effect="NoExecute")
    assert new.fingerprint() != old.fingerprint()
    same = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule")
    assert same.fingerprint() == old.fingerprint()  # such a reload keeps the running one
    new.adopt(old)
    status = new.status()
    assert status["failures"] == {"http_500": 2}
    assert status["rules"][G1]["effect"] == "NoSchedule"
    assert status["requests"] == old.status()["requests"]
    mark = len(api.requests)
    clock.now += 30
    new.reconcile()
    gets = [r for r in api.requests[mark:] if r["method"] == "GET"]
    assert [r["path"] for r in gets] == [RULES_PATH]  # no second read of the Node
    assert api.rules[NAME1]["spec"]["taint"]["effect"] == "NoExecute"


def test_a_replaced_writer_is_stopped_and_joined_before_the_next_starts(api, pki, tmp_path):
    async def go() -> tuple[KubeHealthWriter, KubeHealthWriter]:
        store, clock = Store(), Clock()
        publish(store, verdict("0", G0, "ok"))
        old = writer(api, pki, tmp_path, store, clock, interval=0.1)
        await old.start()
        while old.status()["reconciles"] < 2:
            await asyncio.sleep(0.02)
        await asyncio.wait_for(old.stop(1.5), old.stop_seconds(1.5) + 0.5)
        assert old._thread is not None and not old._thread.is_alive()
        new = writer(api, pki, tmp_path, store, clock, interval=0.1)
        new.adopt(old)
        await new.start()
        await asyncio.sleep(0.3)
        await new.stop(1.5)
        return old, new

    old, new = asyncio.run(go())
    assert new.status()["reconciles"] > old.status()["reconciles"]


# -- drift -------------------------------------------------------------------------------


def test_a_rule_deleted_by_hand_is_created_again_no_effect_first(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule")
    publish(store, verdict("0", G0, "failed", "xid_79", action="reboot_node"))
    w.reconcile()
    clock.now += 30
    w.reconcile()
    assert api.rules[NAME0]["spec"]["taint"]["effect"] == "NoSchedule"
    del api.rules[NAME0]  # kubectl delete devicetaintrule ...
    clock.now += 30
    with capture_logs() as logs:
        w.reconcile()
        assert api.rules[NAME0]["spec"]["taint"]["effect"] == "None"
        clock.now += 30
        w.reconcile()
    assert api.rules[NAME0]["spec"]["taint"]["effect"] == "NoSchedule"
    assert [e["event"] for e in logs if e["event"].startswith("device taint")] == [
        "device taint recreated"
    ]


def test_an_edited_effect_and_selector_are_restored(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoExecute")
    publish(store, verdict("0", G0, "failed", "xid_79", action="reboot_node"))
    for _ in range(2):
        w.reconcile()
        clock.now += 30
    spec = api.rules[NAME0]["spec"]
    wanted = {k: dict(v) for k, v in spec.items()}
    spec["taint"]["effect"] = "None"
    spec["taint"]["value"] = "ignore-me"
    spec["deviceSelector"] = {"driver": "gpu.nvidia.com"}  # would taint every GPU of it
    w.reconcile()
    assert api.rules[NAME0]["spec"] == wanted
    assert api.invalid == []


def test_a_409_on_create_adopts_our_rule_the_list_missed(api, pki, tmp_path):
    store, clock = Store(), Clock()
    publish(store, verdict("0", G0, "failed", "xid_79"))
    writer(api, pki, tmp_path, store, clock).reconcile()  # an earlier run made it
    api.unlisted = {NAME0}  # the list comes from a cache that has not seen it yet
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule")
    w.reconcile()
    assert [r["method"] for r in rule_requests(api)][-2:] == ["POST", "GET"]
    assert w.status()["failures"] == {} and G0 in w.status()["rules"]
    api.unlisted = set()
    clock.now += 30
    w.reconcile()
    assert api.rules[NAME0]["spec"]["taint"]["effect"] == "NoSchedule"


@pytest.mark.parametrize("lie", ["garbage_for", "wrong_kind"])
def test_a_lying_create_is_a_bad_reply_and_nothing_is_claimed(api, pki, tmp_path, lie):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    publish(store, verdict("0", G0, "failed", "xid_79"))
    setattr(api, lie, {"POST"})
    with capture_logs() as logs:
        w.reconcile()
    status = w.status()
    assert status["failures"] == {"bad_reply": 1} and status["rules"] == {}
    assert api.rules == {}
    assert not [e for e in logs if e["event"] == "device tainted"]
    # The Node condition, a step of its own, was written all the same.
    assert condition(api)["status"] == "False" and status["condition"] == "False"
    setattr(api, lie, set())
    clock.now += 30
    w.reconcile()
    assert NAME0 in api.rules and G0 in w.status()["rules"]


@pytest.mark.parametrize("lie", ["garbage_for", "wrong_kind"])
def test_lying_lists_and_patches_are_bad_replies(api, pki, tmp_path, lie):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule")
    publish(store, verdict("0", G0, "failed", "xid_79"))
    w.reconcile()
    setattr(api, lie, {"PATCH"})
    clock.now += 30
    publish(store, verdict("0", G0, "failed", "xid_48", "xid_79"))
    w.reconcile()  # the effect patch and the changed condition: both lied about
    status = w.status()
    assert status["failures"] == {"bad_reply": 2}
    assert status["rules"][G0]["effect"] == "None"  # what the server confirmed
    assert api.rules[NAME0]["spec"]["taint"]["effect"] == "None"
    setattr(api, lie, {"GET"})
    clock.now += 30
    w.reconcile()
    assert w.status()["failures"] == {"bad_reply": 3}  # the list
    # The condition the lie swallowed is sent again (the rules step failing or not).
    assert condition(api)["message"].endswith("failed: xid_48,xid_79")
    setattr(api, lie, set())
    clock.now += 30
    w.reconcile()
    assert api.rules[NAME0]["spec"]["taint"]["effect"] == "NoSchedule"
    assert w.status()["rules"][G0]["effect"] == "NoSchedule"


def test_a_failing_rule_step_still_writes_the_node_condition(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    publish(store, verdict("0", G0, "failed", "xid_79", action="reboot_node"))
    api.path_status = {RULES_PATH: 403}
    w.reconcile()
    status = w.status()
    assert status["failures"] == {"http_403": 1} and status["last_success"] is None
    assert condition(api)["status"] == "False"
    assert "xid_79 -> reboot_node" in condition(api)["message"]


# -- the Node condition and the quiet cost -----------------------------------------------


def test_the_condition_is_patched_on_change_and_as_a_5_minute_heartbeat(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    sent = []
    for i in range(40):  # 20 minutes at 30 s
        if i == 13:
            publish(store, verdict("0", G0, "ok"), verdict("1", G1, "failed", "xid_48"))
        w.reconcile()
        sent.append(len(node_patches(api)))
        clock.now += 30
    at = [i for i in range(40) if sent[i] != (sent[i - 1] if i else 0)]
    # t=0, heartbeats at 5 and 10 minutes, the failure at 6.5 minutes, 5 minutes after it.
    assert at == [0, 10, 13, 23, 33]
    assert condition(api)["status"] == "False"
    assert condition(api)["lastTransitionTime"] == rfc3339(Clock().now + 13 * 30)
    assert condition(api)["lastHeartbeatTime"] == rfc3339(Clock().now + 33 * 30)


def test_a_quiet_hour_costs_at_most_15_requests(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    for _ in range(120):  # one hour at the default 30 s
        w.reconcile()
        clock.now += 30
    assert len(api.requests) <= 15
    assert sum(w.status()["requests"].values()) == len(api.requests)
    assert len(node_patches(api)) == 12 and w.status()["failures"] == {}


def test_a_restart_with_no_data_leaves_the_condition_as_it_is(api, pki, tmp_path):
    store, clock = Store(), Clock()
    api.nodes[NODE] = node(
        NODE,
        [
            {
                "type": "AcceleratorHealthy",
                "status": "False",
                "reason": "AcceleratorUnhealthy",
                "message": f"1 ({G1}) failed: xid_79 -> reboot_node",
                "lastHeartbeatTime": rfc3339(clock.now - 60),
                "lastTransitionTime": rfc3339(clock.now - 3600),
            }
        ],
    )
    w = writer(api, pki, tmp_path, store, clock)
    for _ in range(20):  # ten minutes without a verdict
        w.reconcile()
        clock.now += 30
    assert node_patches(api) == [] and condition(api)["status"] == "False"
    assert w.status()["condition"] == "False"
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "ok"))
    w.reconcile()
    assert condition(api)["status"] == "True"
    assert condition(api)["lastTransitionTime"] == rfc3339(clock.now)


@pytest.mark.parametrize("first", ["ok", "failed"])
def test_an_unknown_device_neither_turns_the_condition_false_nor_lifts_it(
    api, pki, tmp_path, first
):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_rules=False)
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, first, "xid_79"))
    w.reconcile()
    status = condition(api)["status"]
    assert status == ("True" if first == "ok" else "False")
    publish(store, verdict("0", G0, "ok"), verdict("1", G1, "unknown", why="worker_down"))
    for _ in range(20):  # ten minutes: past clear_after
        clock.now += 30
        w.reconcile()
    assert condition(api)["status"] == status
    assert f"1 ({G1}) unknown (worker_down)" in condition(api)["message"]


def test_a_device_without_a_rule_keeps_the_condition_false_for_clear_after(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_rules=False, clear_after=120.0)
    publish(store, verdict("0", G0, "failed", "xid_79"))
    w.reconcile()
    publish(store, verdict("0", G0, "ok"))
    seen = []
    for _ in range(6):
        clock.now += 30
        w.reconcile()
        seen.append(condition(api)["status"])
    assert seen == ["False", "False", "False", "False", "True", "True"]


def test_a_failed_condition_patch_is_sent_again(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_rules=False)
    publish(store, verdict("0", G0, "ok"))
    w.reconcile()
    publish(store, verdict("0", G0, "failed", "xid_79"))
    api.path_status = {f"/api/v1/nodes/{NODE}/status": 500}
    clock.now += 30
    w.reconcile()
    assert w.status()["failures"] == {"http_500": 1} and condition(api)["status"] == "True"
    api.path_status = {}
    clock.now += 30
    w.reconcile()
    assert condition(api)["status"] == "False"


# -- slow and hung servers (need exporter/kube.py's one-deadline client) -------------------

ONE_DEADLINE = importlib.util.find_spec("exporter.kube") is not None
NO_CLIENT = (
    "needs exporter/kube.py (the kube helper's client, one deadline for the whole request):"
    " with outputs/kube_client.py's urlopen a trickling server is never a timeout"
)


@pytest.mark.skipif(not ONE_DEADLINE, reason=NO_CLIENT)
@pytest.mark.parametrize("switch", [("trickle", 0.2), ("hang_after_tls", True)])
def test_a_slow_or_hung_server_is_one_timeout_per_step_within_its_deadline(
    api, pki, tmp_path, switch
):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, timeout=1.0)
    publish(store, verdict("0", G0, "failed", "xid_79"))
    setattr(api, *switch)
    started = time.monotonic()
    w.reconcile()
    took = time.monotonic() - started
    # Two steps, each one request cut at its 1 s deadline; a reply of a few hundred
    # bytes trickled at 0.2 s a byte would take a minute, a hung one for ever.
    assert took < 3 * 2 * w.config.timeout
    status = w.status()
    assert status["failures"] == {"timeout": 2}
    assert status["rules"] == {} and status["condition"] is None
