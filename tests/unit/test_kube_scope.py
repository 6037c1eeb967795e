"""Which rules the scopes of bad devices ask for (exporter/outputs/kube_scope.py), and how a
pass treats a rule by its culprits (exporter/outputs/kube_rules.plan)."""

from __future__ import annotations

from exporter.enrich.dra import DraDevice, SliceDevice
from exporter.outputs.kube_rules import (
    CULPRITS_ANNOTATION,
    HEALTHY_SINCE,
    POOL_ANNOTATION,
    REASONS_ANNOTATION,
    SCOPE_ANNOTATION,
    UUID_ANNOTATION,
    Delete,
    Listed,
    Patch,
    Settings,
    plan,
    rfc3339,
)
from exporter.outputs.kube_scope import Pool, targets
from exporter.outputs.kube_selector import Selector, pool_key, pool_of_key
from exporter.verdict import DeviceHealth
from tests.helpers.kube_writer import verdict

NOW = 1_800_000_000.0
SETTINGS = Settings("accel-exporter.io/unhealthy", "NoSchedule", False, 300.0)
U = [f"GPU-{i}" for i in range(4)]
REFS = {u: DraDevice("d", "p", f"gpu-{i}") for i, u in enumerate(U)}


def pool(*devices: SliceDevice, complete: bool = True) -> dict[tuple[str, str], Pool]:
    return {("d", "p"): Pool("d", "p", devices, complete)}


def gpus(n: int = 4) -> tuple[SliceDevice, ...]:
    return tuple(SliceDevice(REFS[u], uuid=u) for u in U[:n])


def hive(uuid: str, members: list[str], action: str = "reset_device") -> DeviceHealth:
    return verdict(
        "0",
        uuid,
        "failed",
        "afid_13",
        action=action,
        scope="peer_domain",
        scope_uuids=tuple(members),
    )


def test_a_scope_that_is_the_pool_is_one_pool_wide_want():
    found = targets({U[0]: hive(U[0], U)}, REFS, pool(*gpus()))
    (want,) = found.wants.values()
    assert want.key == pool_key("d", "p") and want.pool_wide
    assert want.selector == Selector("d", "p", "") and want.selector.as_dict() == {
        "driver": "d",
        "pool": "p",
    }
    assert want.covers == tuple(U) and want.culprits == (U[0],) and want.scope == "peer_domain"


def test_part_of_a_pool_an_unlisted_pool_or_one_device_is_a_want_per_device():
    part = targets({U[0]: hive(U[0], U[:2])}, REFS, pool(*gpus()))
    assert sorted(part.wants) == U[:2]
    assert part.wants[U[1]].selector == Selector("d", "p", "gpu-1")
    partial = targets({U[0]: hive(U[0], U)}, REFS, pool(*gpus(), complete=False))
    assert sorted(partial.wants) == U
    # A device-scope failure on a pool of one device: its own rule, not the pool's.
    one = {U[0]: verdict("0", U[0], "failed", "xid_79", action="reboot_node")}
    alone = targets(one, REFS, pool(*gpus(1)))
    assert list(alone.wants) == [U[0]]


def test_partitions_of_the_scope_s_gpus_are_of_the_scope():
    mig = SliceDevice(DraDevice("d", "p", "gpu-0-mig-1"), uuid="MIG-x", parent_uuid=U[0])
    found = targets({U[0]: hive(U[0], U)}, REFS, pool(*gpus(), mig))
    assert list(found.wants) == [pool_key("d", "p")]
    stranger = SliceDevice(DraDevice("d", "p", "gpu-9"), uuid="GPU-9")
    found = targets({U[0]: hive(U[0], U)}, REFS, pool(*gpus(), stranger))
    assert sorted(found.wants) == U  # the pool holds a device the scope does not


def test_the_node_s_scope_takes_each_pool_it_touches_and_misses_are_named():
    refs = {**REFS, U[3]: DraDevice("d", "q", "gpu-3")}
    bad = {
        U[0]: verdict(
            "0",
            U[0],
            "failed",
            "xid_79",
            action="reboot_node",
            scope="node",
            scope_uuids=(*U, "GPU-unpublished"),
        )
    }
    pools = {**pool(*gpus(3)), ("d", "q"): Pool("d", "q", (SliceDevice(refs[U[3]], U[3]),), True)}
    found = targets(bad, refs, pools)
    assert sorted(found.wants) == [pool_key("d", "p"), pool_key("d", "q")]
    assert found.unresolved == {U[0]: ("GPU-unpublished",)}


def test_overlapping_scopes_make_one_want_per_device_with_every_culprit():
    bad = {
        U[0]: hive(U[0], U[:2]),
        U[1]: hive(U[1], U[:2], action="replace_device"),
        U[2]: verdict("2", U[2], "failed", "xid_48", action="reset_device"),
    }
    found = targets(bad, REFS, pool(*gpus()))
    assert sorted(found.wants) == U[:3]
    assert found.wants[U[0]].culprits == (U[0], U[1])
    assert found.wants[U[0]].action == "replace_device"  # the most disruptive
    assert found.wants[U[2]].culprits == (U[2],) and found.wants[U[2]].scope == "device"
    # A pool-wide want takes in the device wants of its pool.
    bad[U[3]] = hive(U[3], U, action="reset_device")
    found = targets(bad, REFS, pool(*gpus()))
    (want,) = found.wants.values()
    assert want.pool_wide and want.culprits == tuple(U)
    assert want.reasons == ("afid_13", "xid_48") and want.action == "replace_device"


def test_keys_of_pools():
    assert pool_of_key(pool_key("gpu.amd.com", "node/a")) == ("gpu.amd.com", "node/a")
    assert pool_of_key("GPU-0") is None and pool_of_key("pool:x") is None


def rule(key_notes: dict[str, str], culprits: str, since: str = "") -> Listed:
    notes = {**key_notes, CULPRITS_ANNOTATION: culprits, REASONS_ANNOTATION: "afid_13"}
    notes[SCOPE_ANNOTATION] = "peer_domain"
    if since:
        notes[HEALTHY_SINCE] = since
    found = Listed.of(
        {
            "metadata": {"name": "r", "uid": "u1", "annotations": notes},
            "spec": {
                "deviceSelector": {"driver": "d", "pool": "p", "device": "gpu-1"},
                "taint": {
                    "key": "accel-exporter.io/unhealthy",
                    "value": "reset_device",
                    "effect": "NoSchedule",
                },
            },
        }
    )
    assert found is not None
    return found


def test_a_rule_is_held_by_its_culprits_not_by_its_device():
    # GPU-1's rule, put there by GPU-0's hive reset; GPU-1 itself is fine.
    listed = {U[1]: rule({UUID_ANNOTATION: U[1]}, U[0], since=rfc3339(NOW - 900))}
    ok = {u: verdict(str(i), u, "ok") for i, u in enumerate(U)}
    (step,) = plan(listed, {}, ok, {}, SETTINGS, NOW).steps
    assert isinstance(step, Delete)
    unknown = {**ok, U[0]: verdict("0", U[0], "unknown", why="worker down")}
    out = plan(listed, {}, unknown, {}, SETTINGS, NOW)
    assert out.steps == [] and out.held == {U[0]: "unknown"}
    assert out.clocks == {U[1]: NOW - 900}
    # Bad, with a scope not resolved this pass: kept as it is.
    bad = {**ok, U[0]: hive(U[0], U[:2])}
    out = plan(listed, {}, bad, {}, SETTINGS, NOW, pending=frozenset({U[0]}))
    assert out.steps == [] and out.held == {}


def test_a_want_adds_its_culprits_and_stops_the_clock():
    listed = {U[1]: rule({UUID_ANNOTATION: U[1]}, U[0], since=rfc3339(NOW - 100))}
    bad = {U[0]: hive(U[0], U[:2]), U[2]: hive(U[2], U[1:3])}
    wants = targets(bad, REFS, pool(*gpus())).wants
    out = plan(listed, {}, {**bad, U[1]: verdict("1", U[1], "ok")}, wants, SETTINGS, NOW)
    patch = next(s for s in out.steps if isinstance(s, Patch))
    assert patch.body["metadata"]["annotations"] == {
        CULPRITS_ANNOTATION: f"{U[0]},{U[2]}",
        HEALTHY_SINCE: None,
    }
    assert patch.intent.culprits == (U[0], U[2])
    # The rules of GPU-0 and GPU-2 (whose scopes reach them) created alongside.
    assert sorted(s.key for s in out.steps) == U[:3]


def test_a_pool_rule_reads_back_by_its_pool():
    found = rule({POOL_ANNOTATION: "d/p"}, U[0])
    assert found.key == pool_key("d", "p") and found.culprits == (U[0],)
    assert Listed.of({"metadata": {"name": "r", "annotations": {POOL_ANNOTATION: "d"}}}) is None
    # An older writer's rule names no culprit: its device is.
    old = rule({UUID_ANNOTATION: U[1]}, "")
    assert old.culprits == (U[1],)
