"""The writer's plan for one pass (exporter/outputs/kube_rules.py), case by case."""

from __future__ import annotations

from exporter.enrich.dra import DraDevice
from exporter.outputs.kube_rules import (
    CULPRITS_ANNOTATION,
    HEALTHY_SINCE,
    REASONS_ANNOTATION,
    SCOPE_ANNOTATION,
    UUID_ANNOTATION,
    Create,
    Delete,
    Intent,
    Listed,
    Patch,
    Plan,
    Settings,
    is_bad,
    label_value,
    plan,
    rfc3339,
    stronger,
)
from exporter.outputs.kube_scope import targets
from exporter.verdict import DeviceHealth
from tests.helpers.kube_writer import verdict

NOW = 1_800_000_000.0
U = "GPU-0"
SETTINGS = Settings("accel-exporter.io/unhealthy", "NoSchedule", False, 300.0)


def plan_for(
    rules: dict[str, Listed],
    intents: dict[str, Intent],
    health: dict[str, DeviceHealth],
    settings: Settings,
    now: float,
) -> Plan:
    """plan() with the wants of the bad devices, each its own device d/p/g."""
    bad = {u: d for u, d in health.items() if is_bad(d, settings.taint_degraded)}
    found = targets(bad, {u: DraDevice("d", "p", "g") for u in bad}, {})
    return plan(rules, intents, health, found.wants, settings, now)


def listed(effect: str = "NoSchedule", since: str | None = None, **selector: str) -> Listed:
    notes = {
        UUID_ANNOTATION: U,
        REASONS_ANNOTATION: "xid_79",
        CULPRITS_ANNOTATION: U,
        SCOPE_ANNOTATION: "device",
    }
    if since is not None:
        notes[HEALTHY_SINCE] = since
    rule = Listed.of(
        {
            "metadata": {"name": "r", "uid": "u1", "annotations": notes},
            "spec": {
                "deviceSelector": selector or {"driver": "d", "pool": "p", "device": "g"},
                "taint": {"key": "accel-exporter.io/unhealthy", "value": "x", "effect": effect},
            },
        }
    )
    assert rule is not None
    return rule


def test_unknown_plans_nothing_and_keeps_the_clock():
    rule = listed(since=rfc3339(NOW - 1000))
    for health in ({}, {U: verdict("0", U, "unknown", why="worker_down")}):
        out = plan_for({U: rule}, {}, health, SETTINGS, NOW)
        assert out.steps == [] and out.held == {U: "unknown"}
        assert out.clocks == {U: NOW - 1000}
        assert out.intents == {U: Intent.adopted(rule)}


def test_a_missing_rule_of_a_bad_device_is_created_and_one_of_a_good_device_forgotten():
    bad = {U: verdict("0", U, "failed", "xid_79")}
    out = plan_for({}, {U: Intent.adopted(listed())}, bad, SETTINGS, NOW)
    assert [type(s) for s in out.steps] == [Create] and out.steps[0].again  # type: ignore[union-attr]
    out = plan_for({}, {U: Intent.adopted(listed())}, {U: verdict("0", U, "ok")}, SETTINGS, NOW)
    assert out.steps == [] and out.intents == {}


def test_a_stronger_effect_is_kept_and_hand_added_selector_keys_are_removed():
    rule = listed("NoExecute", driver="d", pool="p", device="g", deviceClassName="gpu")
    out = plan_for(
        {U: rule}, {}, {U: verdict("0", U, "failed", "xid_79", action="x")}, SETTINGS, NOW
    )
    (step,) = out.steps
    assert isinstance(step, Patch)
    assert step.body == {
        "spec": {
            "deviceSelector": {"deviceClassName": None, "driver": "d", "pool": "p", "device": "g"}
        }
    }
    assert step.intent.taint.effect == "NoExecute" and step.what == ("selector",)


def test_a_clock_that_is_not_a_time_or_far_ahead_starts_again():
    ok = {U: verdict("0", U, "ok")}
    for text in ("yesterday", rfc3339(NOW + 3600)):
        (step,) = plan_for({U: listed(since=text)}, {}, ok, SETTINGS, NOW).steps
        assert isinstance(step, Patch) and step.what == ("clock_set",)
        assert step.body == {"metadata": {"annotations": {HEALTHY_SINCE: rfc3339(NOW)}}}
    # A little ahead (clocks of two nodes): kept, and waited for.
    assert plan_for({U: listed(since=rfc3339(NOW + 60))}, {}, ok, SETTINGS, NOW).steps == []


def test_delete_needs_fresh_not_bad_data_and_clear_after_since_the_clock():
    ok = {U: verdict("0", U, "predicted_failure")}  # known, not bad
    assert plan_for({U: listed(since=rfc3339(NOW - 299))}, {}, ok, SETTINGS, NOW).steps == []
    (step,) = plan_for({U: listed(since=rfc3339(NOW - 300))}, {}, ok, SETTINGS, NOW).steps
    assert step == Delete(U, "r", "u1", NOW - 300)
    degraded = {U: verdict("0", U, "degraded")}
    tainting = Settings("accel-exporter.io/unhealthy", "NoSchedule", True, 300.0)
    (step,) = plan_for({U: listed(since=rfc3339(NOW - 900))}, {}, degraded, tainting, NOW).steps
    assert isinstance(step, Patch) and "clock_cleared" in step.what


def test_effects_and_label_values():
    assert stronger("None", "NoExecute") == "NoExecute" == stronger("NoExecute", "NoSchedule")
    assert stronger("Bogus", "None") == "None"
    assert label_value("reboot_node") == "reboot_node" and label_value("") == ""
    assert len(label_value("not a label value!")) == 32
