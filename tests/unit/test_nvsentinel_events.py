"""The NVSentinel event plan: our action -> RecommendedAction, entities, when to send."""

from __future__ import annotations

import pytest

from exporter.actions import ACTIONS
from exporter.config.nvsentinel import NVSENTINEL_ACTIONS, NvsentinelOutputConfig
from exporter.outputs.nvsentinel_events import (
    DEFAULT_ACTIONS,
    Entity,
    Identity,
    Settings,
    plan,
    recommended,
)
from exporter.verdict import DeviceHealth, Finding, Reason

U0, U1 = "GPU-aaaa", "GPU-bbbb"
NV0 = Identity("nvidia", "0", "00000000:17:00.0")


def dev(uuid=U0, state="failed", *codes, action="reboot_node", scope="device", members=()):
    findings = tuple(Finding(c, action, scope=scope) for c in codes)
    return DeviceHealth(
        device="0",
        uuid=uuid,
        state=state,
        reasons=tuple(Reason(c, state) for c in codes),
        findings=findings,
        action=action,
        since=0.0,
        updated=0.0,
        scope=scope,
        scope_uuids=tuple(members),
    )


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("none", "NONE"),
        ("restart_app", "RESTART_APP"),
        ("drain_p2p", "CONTACT_SUPPORT"),
        ("reset_device", "COMPONENT_RESET"),
        ("reboot_node", "RESTART_BM"),
        ("service", "CONTACT_SUPPORT"),
        ("inspect_hardware", "CONTACT_SUPPORT"),
        ("contact_vendor", "CONTACT_SUPPORT"),
        ("replace_device", "REPLACE_VM"),
        ("a_word_from_the_future", "CONTACT_SUPPORT"),
    ],
)
def test_each_action_maps_to_its_recommended_action(ours, theirs):
    assert recommended(ours, Settings(), can_reset=True) == theirs


def test_every_word_of_the_vocabulary_is_mapped_to_a_name_of_the_enum():
    assert set(DEFAULT_ACTIONS) == set(ACTIONS)
    assert set(DEFAULT_ACTIONS.values()) <= set(NVSENTINEL_ACTIONS)


def test_a_reset_without_uuid_and_pci_is_a_reboot_and_overrides_win():
    assert recommended("reset_device", Settings(), can_reset=False) == "RESTART_BM"
    site = Settings(actions={"replace_device": "CONTACT_SUPPORT"})
    assert recommended("replace_device", site, can_reset=True) == "CONTACT_SUPPORT"


def test_config_names_bad_override_keys_and_values():
    bad = NvsentinelOutputConfig(actions={"reboot": "RESTART_BM", "service": "PAGE_SOMEONE"})
    keys = [k for k, _ in bad.check()]
    assert keys == ["actions.reboot", "actions.service"]
    assert NvsentinelOutputConfig(backoff_min=5.0, backoff_max=1.0).check() == [
        ("backoff_max", "must be at least backoff_min")
    ]
    assert NvsentinelOutputConfig().check() == []


def test_a_failed_gpu_is_one_fatal_event_with_its_entities_and_codes():
    step = plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, {}, Settings())
    (event,) = step.events
    assert (event.fatal, event.healthy, event.action) == (True, False, "RESTART_BM")
    assert event.error_codes == ("xid_79",)
    assert event.entities == (
        Entity("GPU", "0"),
        Entity("PCI", "0000:17:00.0"),
        Entity("GPU_UUID", U0),
    )
    assert event.strategy == "STORE_ONLY"
    assert ("accel_exporter.action", "reboot_node") in event.metadata
    assert plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, step.sent, Settings()).events == ()
    shadow_off = plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, {}, Settings(shadow=False))
    assert shadow_off.events[0].strategy == "EXECUTE_REMEDIATION"


def test_recovery_is_one_healthy_event_with_the_same_entities_and_strategy():
    bad = plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, {}, Settings())
    ok = dev(U0, "ok", action="none")
    # Shadow turned off meanwhile: the clearing event keeps the strategy of what it clears.
    back = plan({U0: ok}, {U0: NV0}, bad.sent, Settings(shadow=False))
    (event,) = back.events
    assert (event.healthy, event.fatal, event.action, event.error_codes) == (
        True,
        False,
        "NONE",
        (),
    )
    assert event.entities == bad.events[0].entities and event.strategy == "STORE_ONLY"
    assert plan({U0: ok}, {U0: NV0}, back.sent, Settings()).events == ()


def test_unknown_sends_nothing_and_forgets_nothing():
    bad = plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, {}, Settings())
    unknown = dev(U0, "unknown", "xid_79")
    step = plan({U0: unknown}, {U0: NV0}, bad.sent, Settings())
    assert step.events == () and step.sent == bad.sent
    assert plan({}, {}, bad.sent, Settings()).events == ()
    assert plan({U0: unknown}, {U0: NV0}, {}, Settings()).events == ()


def test_first_sight_ok_is_a_baseline_and_fatal_goes_before_healthy():
    step = plan(
        {U0: dev(U0, "ok", action="none"), U1: dev(U1, "failed", "xid_48", action="reset_device")},
        {U0: NV0, U1: Identity("nvidia", "1", "0000:18:00.0")},
        {},
        Settings(),
    )
    assert [(e.uuid, e.healthy) for e in step.events] == [(U1, False), (U0, True)]
    assert step.events[0].action == "COMPONENT_RESET"


def test_codes_gone_while_still_bad_get_a_partial_healthy_event():
    both = plan({U0: dev(U0, "failed", "xid_48", "xid_79")}, {U0: NV0}, {}, Settings())
    one = plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, both.sent, Settings())
    assert [(e.healthy, e.error_codes) for e in one.events] == [
        (False, ("xid_79",)),
        (True, ("xid_48",)),
    ]


def test_a_reset_of_a_wider_scope_names_every_gpu_and_the_old_entities_are_cleared():
    alone = plan(
        {U0: dev(U0, "failed", "xid_48", action="reset_device")}, {U0: NV0}, {}, Settings()
    )
    hive = dev(
        U0, "failed", "afid_30", action="reset_device", scope="peer_domain", members=(U0, U1)
    )
    wide = plan({U0: hive}, {U0: NV0}, alone.sent, Settings())
    new, cleared = wide.events
    assert [e.value for e in new.entities if e.type == "GPU_UUID"] == [U0, U1]
    assert cleared.healthy and cleared.entities == alone.events[0].entities


def test_other_accelerators_are_their_own_class_and_never_component_reset():
    neuron = Identity("aws", "0", "")
    (event,) = plan(
        {U0: dev(U0, "failed", "x", action="reset_device")}, {U0: neuron}, {}, Settings()
    ).events
    assert event.component_class == "ACCELERATOR" and event.action == "RESTART_BM"
    assert event.entities == (Entity("ACCELERATOR", "0"), Entity("ACCELERATOR_UUID", U0))


def test_resend_sends_an_unchanged_bad_device_again():
    bad = plan({U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, {}, Settings())
    again = plan(
        {U0: dev(U0, "failed", "xid_79")}, {U0: NV0}, bad.sent, Settings(), frozenset({U0})
    )
    assert again.events == bad.events
