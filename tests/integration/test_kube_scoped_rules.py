"""DeviceTaintRules that cover the whole scope of a bad device's action, against the fake
API server (HTTPS, every object validated against Kubernetes 1.36's OpenAPI schema):
an XGMI-hive reset and a baseboard replacement, pool-wide rules where the scope is the
pool, one rule per device where it is part of one, culprits cleared one by one, and a
restart that adopts what it wrote.

Which devices a rule covers is read back as DRA matches a DeviceTaintRule to the
slices (tests/helpers/kube_writer.tainted), never from the writer's own notes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from exporter.outputs.kube_rules import (
    COVERS_ANNOTATION,
    CULPRITS_ANNOTATION,
    HEALTHY_SINCE,
    POOL_ANNOTATION,
    REASONS_ANNOTATION,
    SCOPE_ANNOTATION,
    UUID_ANNOTATION,
    pool_rule_name,
    rule_name,
)
from exporter.outputs.kube_selector import pool_key
from exporter.store import Store
from tests.fakes.kube_api import FakeApiServer, node
from tests.fakes.resource_slices import nvidia_gpu, resource_slice
from tests.helpers.kube_writer import (
    NODE,
    TOKEN,
    Clock,
    condition,
    nvidia_slices,
    rule_requests,
    run_passes,
    tainted,
    verdict,
    writer,
)
from tests.helpers.pki import make_pki

NVIDIA = "gpu.nvidia.com"
GPUS = [f"GPU-{i}0000000-{i}aaa" for i in range(8)]
HIVE = GPUS[:4]  # one XGMI hive (or NVLink clique) of the board's two
POOL_RULE = pool_rule_name(NODE, NVIDIA, NODE)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def api(pki: Path) -> Any:
    with FakeApiServer(pki, token=TOKEN) as server:
        server.nodes = {NODE: node(NODE)}
        server.slices = nvidia_slices(GPUS)
        yield server


def ok(*uuids: str) -> list[Any]:
    return [verdict(str(GPUS.index(u)), u, "ok") for u in uuids]


def hive_reset(uuid: str, hive: list[str] = HIVE) -> Any:
    """A device of the hive failed; its reset reaches every device of the hive."""
    return verdict(
        str(GPUS.index(uuid)),
        uuid,
        "failed",
        "afid_13",
        action="reset_device",
        scope="peer_domain",
        scope_uuids=tuple(hive),
    )


def baseboard(uuid: str) -> Any:
    """A device failed for its baseboard: replacing it takes every GPU of the board."""
    return verdict(
        str(GPUS.index(uuid)),
        uuid,
        "failed",
        "afid_30",
        action="replace_device",
        scope="baseboard",
        scope_uuids=tuple(GPUS),
    )


def others(*bad: Any) -> list[Any]:
    """The bad records and every other GPU ok."""
    named = {b.uuid for b in bad}
    return [*bad, *ok(*(u for u in GPUS if u not in named))]


def test_a_hive_reset_taints_each_device_of_the_hive_and_no_other(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    run_passes(w, store, clock, *others(hive_reset(GPUS[1])))
    # The pool holds 8 and the hive 4: one rule per device of the hive, no pool rule.
    assert sorted(api.rules) == sorted(rule_name(NODE, u) for u in HIVE)
    assert tainted(api) == {u: [rule_name(NODE, u)] for u in HIVE}
    for uuid in HIVE:
        rule = api.rules[rule_name(NODE, uuid)]
        notes = rule["metadata"]["annotations"]
        assert notes[UUID_ANNOTATION] == uuid
        # Healthy itself or not, it says which device's action put it there.
        assert notes[CULPRITS_ANNOTATION] == GPUS[1]
        assert notes[SCOPE_ANNOTATION] == "peer_domain"
        assert notes[REASONS_ANNOTATION] == "afid_13"
        assert rule["spec"]["taint"]["value"] == "reset_device"
        assert rule["spec"]["deviceSelector"]["device"] == f"gpu-{GPUS.index(uuid)}"
    assert api.invalid == []
    message = condition(api)["message"]
    assert f"1 ({GPUS[1]}) failed: afid_13 -> reset_device (peer_domain: 4 devices)" in message
    status = w.status()
    assert sorted(status["rules"]) == sorted(HIVE)
    assert all(r["culprits"] == [GPUS[1]] for r in status["rules"].values())


def test_a_hive_that_is_the_whole_pool_gets_one_pool_wide_rule(api, pki, tmp_path):
    api.slices = nvidia_slices(HIVE)  # this node publishes exactly the hive
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    run_passes(w, store, clock, hive_reset(GPUS[2]), *ok(GPUS[0], GPUS[1], GPUS[3]))
    assert list(api.rules) == [POOL_RULE]
    rule = api.rules[POOL_RULE]
    assert rule["spec"]["deviceSelector"] == {"driver": NVIDIA, "pool": NODE}
    notes = rule["metadata"]["annotations"]
    assert notes[POOL_ANNOTATION] == f"{NVIDIA}/{NODE}" and UUID_ANNOTATION not in notes
    assert notes[COVERS_ANNOTATION] == ",".join(sorted(HIVE))
    assert notes[CULPRITS_ANNOTATION] == GPUS[2]
    assert tainted(api) == {u: [POOL_RULE] for u in HIVE}
    assert api.invalid == []
    assert list(w.status()["rules"]) == [pool_key(NVIDIA, NODE)]


def test_a_baseboard_replacement_is_one_pool_wide_rule_until_it_clears(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, taint_effect="NoExecute", clear_after=300.0)
    run_passes(w, store, clock, *others(baseboard(GPUS[5])), passes=2)
    assert list(api.rules) == [POOL_RULE]
    rule = api.rules[POOL_RULE]
    assert rule["spec"]["taint"] == {
        "key": "accel-exporter.io/unhealthy",
        "value": "replace_device",
        "effect": "NoExecute",  # None first, the configured effect at the next pass
    }
    assert rule["metadata"]["annotations"][COVERS_ANNOTATION] == ",".join(sorted(GPUS))
    assert tainted(api) == {u: [POOL_RULE] for u in GPUS}
    assert len(rule_requests(api, "POST")) == 1
    assert "(baseboard: 8 devices)" in condition(api)["message"]

    # Replaced: fresh not-bad data starts the rule's clock; gone after clear_after.
    run_passes(w, store, clock, *ok(*GPUS))
    started = clock.now
    assert api.rules[POOL_RULE]["metadata"]["annotations"][HEALTHY_SINCE].endswith("Z")
    assert condition(api)["status"] == "False" and "recovering" in condition(api)["message"]
    clock.now = started + 299
    w.reconcile()
    assert POOL_RULE in api.rules
    clock.now = started + 301
    w.reconcile()
    assert api.rules == {} and condition(api)["status"] == "True"
    (delete,) = rule_requests(api, "DELETE")
    assert delete["path"].endswith(POOL_RULE)
    assert api.invalid == [] and w.status()["failures"] == {}


def test_a_device_in_the_scope_of_two_bad_devices_gets_one_rule(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    run_passes(w, store, clock, *others(hive_reset(GPUS[0]), hive_reset(GPUS[3])))
    assert sorted(api.rules) == sorted(rule_name(NODE, u) for u in HIVE)
    for uuid in HIVE:
        notes = api.rules[rule_name(NODE, uuid)]["metadata"]["annotations"]
        assert notes[CULPRITS_ANNOTATION] == f"{GPUS[0]},{GPUS[3]}"
    # A baseboard failure on top: the pool-wide rule covers the hive too, one rule
    # per device; the hive's device rules, asked for by no scope now, clear as
    # recovered ones do.
    run_passes(
        w, store, clock, *others(hive_reset(GPUS[0]), hive_reset(GPUS[3]), baseboard(GPUS[6]))
    )
    assert POOL_RULE in api.rules
    notes = api.rules[POOL_RULE]["metadata"]["annotations"]
    assert notes[CULPRITS_ANNOTATION] == ",".join(sorted([GPUS[0], GPUS[3], GPUS[6]]))
    assert notes[REASONS_ANNOTATION] == "afid_13,afid_30"
    # The most disruptive action of the culprits is the taint's value.
    assert api.rules[POOL_RULE]["spec"]["taint"]["value"] == "replace_device"
    assert all(
        HEALTHY_SINCE in api.rules[rule_name(NODE, u)]["metadata"]["annotations"] for u in HIVE
    )
    assert api.invalid == []


def test_the_rules_go_only_once_every_culprit_has_cleared(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, clear_after=300.0)
    a, b = GPUS[1], GPUS[2]
    run_passes(w, store, clock, *others(hive_reset(a), hive_reset(b)))
    hive_rules = sorted(rule_name(NODE, u) for u in HIVE)
    assert sorted(api.rules) == hive_rules

    # a is fine again, b still asks: the rules stay, no clock.
    run_passes(w, store, clock, *others(hive_reset(b)), passes=20)
    assert sorted(api.rules) == hive_rules
    assert not any(HEALTHY_SINCE in r["metadata"]["annotations"] for r in api.rules.values())
    assert w.status()["held"] == {a: "recovering"}

    # b is fine too, but a's worker is down: no fresh evidence for a culprit, nothing moves.
    down = verdict("1", a, "unknown", why="worker down: timeout")
    records = [down, *ok(*(u for u in GPUS if u != a))]
    run_passes(w, store, clock, *records, passes=20)
    assert sorted(api.rules) == hive_rules
    assert not rule_requests(api, "DELETE")
    assert w.status()["held"] == {a: "unknown", b: "recovering"}
    assert condition(api)["status"] == "False"

    # Both fresh and not bad: one clock per rule, every rule gone after clear_after.
    run_passes(w, store, clock, *ok(*GPUS))
    started = clock.now
    assert all(HEALTHY_SINCE in r["metadata"]["annotations"] for r in api.rules.values())
    clock.now = started + 299
    w.reconcile()
    assert sorted(api.rules) == hive_rules
    clock.now = started + 300
    w.reconcile()
    assert api.rules == {} and w.status()["held"] == {}
    assert condition(api)["status"] == "True"
    assert api.invalid == []


def test_a_culprit_bad_again_stops_the_clock_of_every_rule_of_its_scope(api, pki, tmp_path):
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, clear_after=300.0)
    run_passes(w, store, clock, *others(hive_reset(GPUS[1])))
    run_passes(w, store, clock, *ok(*GPUS), passes=5)  # 150 s healthy
    run_passes(w, store, clock, *others(hive_reset(GPUS[1])))
    assert not any(HEALTHY_SINCE in r["metadata"]["annotations"] for r in api.rules.values())
    run_passes(w, store, clock, *ok(*GPUS), passes=9)  # 270 s: not yet
    assert len(api.rules) == 4
    run_passes(w, store, clock, *ok(*GPUS), passes=2)
    assert api.rules == {}


def two_pools() -> list[dict[str, Any]]:
    """GPUs 0-3 in the node's pool, 4-7 in a second pool of the same driver."""
    second = [nvidia_gpu(i, GPUS[i], f"0000:{0x40 + i:02x}:00.0") for i in range(4, 8)]
    return [*nvidia_slices(HIVE), resource_slice(NODE, NVIDIA, second, pool=f"{NODE}-b")]


def test_a_restart_adopts_its_scoped_rules_and_changes_nothing(api, pki, tmp_path):
    api.slices = two_pools()
    store, clock = Store(), Clock()
    first = writer(api, pki, tmp_path, store, clock, taint_effect="NoSchedule")
    # A hive that is the first pool (one pool-wide rule), and a hive of two devices of
    # the second (a rule each, one for a device that is itself fine).
    bad = [hive_reset(GPUS[1]), hive_reset(GPUS[5], hive=GPUS[4:6])]
    records = others(*bad)
    run_passes(first, store, clock, *records, passes=2)
    keys = sorted([pool_key(NVIDIA, NODE), GPUS[4], GPUS[5]])
    assert sorted(first.status()["rules"]) == keys
    assert (
        api.rules[rule_name(NODE, GPUS[4])]["metadata"]["annotations"][CULPRITS_ANNOTATION]
        == GPUS[5]
    )
    before = copy.deepcopy(api.rules)
    seen = len(api.requests)

    store2, clock2 = Store(), Clock(clock.now)
    second = writer(api, pki, tmp_path, store2, clock2, taint_effect="NoSchedule")
    # Before its first poll: every rule held as it is.
    clock2.now += 30
    second.reconcile()
    assert sorted(second.status()["rules"]) == keys
    assert second.status()["held"] == {u: "unknown" for u in (GPUS[1], GPUS[5])}
    # Its first polls, the same records: every rule recognised, nothing sent.
    run_passes(second, store2, clock2, *records, passes=3)
    writes = [
        r
        for r in api.requests[seen:]
        if r["method"] in ("POST", "PATCH", "DELETE") and r["path"].startswith("/apis/")
    ]
    assert writes == [] and api.rules == before
    assert second.status()["failures"] == {}


def test_a_node_scope_taints_each_of_its_pools_of_our_devices_only(api, pki, tmp_path):
    api.slices = [
        *nvidia_slices(GPUS[:4]),
        # The same driver publishes a second pool on this node; a NIC driver a third.
        resource_slice(
            NODE,
            NVIDIA,
            [nvidia_gpu(i, GPUS[i], f"0000:{0x40 + i:02x}:00.0") for i in (4, 5)],
            pool=f"{NODE}-b",
        ),
        resource_slice(
            NODE,
            "nic.example.com",
            [{"name": "eth0", "attributes": {"mac": {"string": "aa:bb"}}}],
        ),
    ]
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    reboot = verdict(
        "0",
        GPUS[0],
        "failed",
        "xid_79",
        action="reboot_node",
        scope="node",
        scope_uuids=tuple(GPUS[:6]),
    )
    run_passes(w, store, clock, reboot, *ok(*GPUS[1:6]))
    b_rule = pool_rule_name(NODE, NVIDIA, f"{NODE}-b")
    assert sorted(api.rules) == sorted([POOL_RULE, b_rule])
    assert api.rules[b_rule]["spec"]["deviceSelector"] == {"driver": NVIDIA, "pool": f"{NODE}-b"}
    assert sorted(tainted(api)) == sorted(GPUS[:6])  # eth0 untouched
    assert api.invalid == []


def test_a_pool_not_listed_whole_is_never_taken_for_the_scope(api, pki, tmp_path):
    """A pool of two slices of which one is listed: the scope is covered device by device."""
    (one,) = nvidia_slices(GPUS)
    one["spec"]["pool"]["resourceSliceCount"] = 2
    api.slices = [one]
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock)
    run_passes(w, store, clock, *others(baseboard(GPUS[0])))
    assert sorted(api.rules) == sorted(rule_name(NODE, u) for u in GPUS)
    assert api.invalid == []


def test_a_scope_device_no_slice_names_is_listed_and_the_rest_tainted(api, pki, tmp_path):
    (one,) = nvidia_slices(GPUS)
    # The hive's fourth device is not published (yet).
    one["spec"]["devices"] = [d for d in one["spec"]["devices"] if d["name"] != "gpu-3"]
    api.slices = [one]
    store, clock = Store(), Clock()
    w = writer(api, pki, tmp_path, store, clock, clear_after=0.0)
    run_passes(w, store, clock, *others(hive_reset(GPUS[0])))
    assert sorted(api.rules) == sorted(rule_name(NODE, u) for u in GPUS[:3])
    assert w.status()["unresolved_devices"] == [GPUS[3]]
    assert sorted(tainted(api)) == sorted(GPUS[:3])
    # Published late: its rule follows at the next listing.
    api.slices = nvidia_slices(GPUS)
    run_passes(w, store, clock, *others(hive_reset(GPUS[0])), passes=5, every=30.0)
    assert sorted(tainted(api)) == sorted(HIVE) and w.status()["unresolved_devices"] == []
