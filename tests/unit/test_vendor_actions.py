"""Every vendor's signals mapped to the one vocabulary: the tables and the judge applying them."""

from __future__ import annotations

import pytest

from exporter import actions, health_rules
from exporter.catalog.vocabulary import ACTION_PROVENANCES, ACTION_SCOPES, RECOMMENDED_ACTIONS
from exporter.health import HealthJudge
from exporter.model import Reading

A = ("0", "GPU-a")
NOW = 1_700_000_000.0


def record(readings):
    """The one device's record from a fresh judge."""
    (got,) = [
        r
        for r in HealthJudge(wall=lambda: NOW, boot_time=lambda: 0.0).judge(readings)
        if (r.device, r.uuid) == A
    ]
    return got


def finding(rec, reason):
    (f,) = [f for f in rec.findings if f.reason == reason]
    return f


def up(value=1.0):
    return Reading("accel_device_up", A, value)


# -- the tables ------------------------------------------------------------------------


def every_advice():
    yield from actions.RECOVERY_ADVICE.values()
    yield from health_rules.REASON_ADVICE.values()
    yield from health_rules.DOWN_ADVICE.values()
    yield from health_rules.GROWTH_ADVICE.values()
    for code in range(1, 200):
        yield actions.xid_action(code).advice


def test_every_row_speaks_the_vocabulary():
    for advice in every_advice():
        assert advice.action in RECOMMENDED_ACTIONS, advice
        assert advice.scope in ACTION_SCOPES, advice
        assert advice.escalation in ("", *RECOMMENDED_ACTIONS), advice
        assert advice.provenance in ACTION_PROVENANCES, advice
        assert advice.reference or advice.provenance == "unknown_code", advice


@pytest.mark.parametrize(
    ("code", "action", "scope", "escalation"),
    [
        (13, "restart_app", "device", "reset_device"),  # RESTART_APP / WORKFLOW_XID_13
        (8, "restart_app", "device", "contact_vendor"),  # RESTART_APP / CONTACT_SUPPORT
        (11, "restart_app", "device", "none"),  # RESTART_APP / CHECK_APP/CUDA
        (48, "reset_device", "device", "contact_vendor"),  # WORKFLOW_XID_48
        (54, "inspect_hardware", "device", "contact_vendor"),  # CHECK_MECHANICALS
        (63, "none", "device", ""),  # IGNORE / IGNORE
        (74, "reset_device", "peer_domain", "contact_vendor"),  # WORKFLOW_NVLINK_ERR
        (78, "service", "device", ""),  # UPDATE_SWFW / UPDATE_SWFW
        (79, "reboot_node", "node", "contact_vendor"),  # RESTART_BM
        (110, "reset_device", "device", "none"),  # RESET_GPU / INVESTIGATE_SW
        (136, "reset_device", "device", "inspect_hardware"),  # INVESTIGATE_LINK_SI
        (145, "reset_device", "peer_domain", "contact_vendor"),  # WORKFLOW_NVLINK5_ERR
        (151, "reboot_node", "node", "contact_vendor"),  # RESTART_VM
        (2, "contact_vendor", "device", ""),  # "Unused": CONTACT_SUPPORT
    ],
)
def test_each_xid_bucket_gives_its_action_scope_and_escalation(code, action, scope, escalation):
    entry = actions.xid_action(code)
    assert (entry.action, entry.advice.scope, entry.advice.escalation) == (
        action,
        scope,
        escalation,
    )
    assert entry.advice.provenance == "vendor_catalog"
    assert entry.advice.reference == actions.XID_CATALOG_VERSION


def test_mechanicals_and_firmware_say_what_in_the_detail():
    assert "mechanicals" in actions.xid_action(54).advice.detail
    assert actions.xid_action(78).advice.detail.startswith("update driver/firmware")


@pytest.mark.parametrize("code", [165, 172, 4000])
def test_an_xid_no_table_names_asks_for_service_with_its_code(code):
    advice = actions.xid_action(code).advice
    assert advice.action == "service" and advice.provenance == "unknown_code"
    assert f"xid {code}" in advice.detail


def test_a_configured_xid_action_wins_and_says_so():
    advice = actions.xid_action(79, {"79": "reset_device"}).advice
    assert (advice.action, advice.provenance) == ("reset_device", "config")


@pytest.mark.parametrize(
    ("name", "action", "scope"),
    [
        ("gpu_reset", "reset_device", "device"),
        ("node_reboot", "reboot_node", "node"),
        ("system_reboot", "reboot_node", "node"),
        ("drain_p2p", "drain_p2p", "peer_domain"),
        ("drain_and_reset", "reset_device", "peer_domain"),
        ("recover_imex_domain", "service", "peer_domain"),
        ("bus_reset", "reset_device", "device"),
    ],
)
def test_each_recovery_action_maps_with_its_scope(name, action, scope):
    advice = actions.recovery_advice(name)
    assert (advice.action, advice.scope, advice.provenance) == (action, scope, "vendor_catalog")


def test_an_unknown_recovery_action_asks_for_service_with_its_name():
    advice = actions.recovery_advice("future_thing")
    assert advice.action == "service" and "future_thing" in advice.detail


# -- the judge: NVIDIA reasons and XIDs carry the rows' fields -----------------------


def test_a_row_remap_failure_asks_for_a_new_gpu_citing_nvidia():
    rec = record([up(), Reading("accel_remapped_rows_failure", A, 1.0)])
    f = finding(rec, "row_remap_failure")
    assert (f.action, f.provenance) == ("replace_device", "vendor_catalog")
    assert "RMA" in f.reference and rec.action == "replace_device"


def test_an_xid_finding_carries_scope_escalation_and_catalog():
    rec = record([up(), Reading("accel_xid_last_timestamp_seconds", (*A, "74"), NOW - 5)])
    f = finding(rec, "xid_74")
    assert (f.action, f.scope, f.escalation) == ("reset_device", "peer_domain", "contact_vendor")
    assert (rec.scope, rec.escalation) == ("peer_domain", "contact_vendor")
    assert f.reference == actions.XID_CATALOG_VERSION and f.immediate == "WORKFLOW_NVLINK_ERR"


def test_the_recovery_action_finding_reaches_the_node():
    rec = record([up(), Reading("accel_device_recovery_action", (*A, "node_reboot"), 1.0)])
    f = finding(rec, "recovery_action_node_reboot")
    assert (f.action, f.scope, rec.scope) == ("reboot_node", "node", "node")


def test_a_device_down_keeps_reset_device_and_its_escalation():
    down = [up(0.0), Reading("accel_device_down_reason_info", (*A, "gpu_lost"), 1.0)]
    f = finding(record(down), "device_down")
    assert (f.action, f.escalation) == ("reset_device", "reboot_node")


# -- Intel Level Zero, Gaudi, TPU -------------------------------------------------------


@pytest.mark.parametrize(
    ("health", "reason", "state", "action"),
    [
        (2.0, "memory_degraded", "degraded", "reset_device"),
        (3.0, "memory_critical", "degraded", "none"),
        (4.0, "memory_replace", "failed", "replace_device"),
    ],
)
def test_intel_memory_health(health, reason, state, action):
    rec = record([up(), Reading("accel_intel_memory_health", A, health)])
    assert rec.reason_states() == {reason: state}
    assert finding(rec, reason).action == action == rec.action


def test_intel_memory_health_ok_is_no_finding():
    rec = record([up(), Reading("accel_intel_memory_health", A, 1.0)])
    assert rec.state == "ok" and rec.findings == () and rec.action == "none"


def test_intel_wedged_asks_a_reset_then_a_reboot_and_replaces_reset_required():
    rec = record(
        [
            up(),
            Reading("accel_intel_reset_required", A, 1.0),
            Reading("accel_intel_reset_reason_info", (*A, "wedged"), 1.0),
        ]
    )
    assert rec.reason_states() == {"reset_wedged": "failed"}
    f = finding(rec, "reset_wedged")
    assert (f.action, f.escalation, f.provenance) == (
        "reset_device",
        "reboot_node",
        "vendor_catalog",
    )


def test_intel_repair_pending_is_degraded_until_a_reset():
    rec = record(
        [
            up(),
            Reading("accel_intel_reset_required", A, 1.0),
            Reading("accel_intel_reset_reason_info", (*A, "repair"), 1.0),
        ]
    )
    assert rec.reason_states() == {"reset_repair": "degraded"} and rec.action == "reset_device"


def test_intel_reset_required_alone_asks_a_reset():
    rec = record([up(), Reading("accel_intel_reset_required", A, 1.0)])
    assert rec.reason_states() == {"reset_required": "failed"} and rec.action == "reset_device"


def test_intel_survivability_mode_asks_for_a_firmware_flash():
    down = [up(0.0), Reading("accel_device_down_reason_info", (*A, "survivability_mode"), 1.0)]
    f = finding(record(down), "device_down")
    assert f.action == "service" and "firmware" in f.detail


def test_gaudi_row_replacement_pending_asks_a_reset():
    rec = record([up(), Reading("accel_gaudi_row_replacement_pending", A, 1.0)])
    assert rec.reason_states() == {"row_replacement_pending": "degraded"}
    assert finding(rec, "row_replacement_pending").reference.startswith("Habana HLML")


def test_a_tpu_chip_gone_from_the_host_asks_a_reboot_of_the_node():
    down = [up(0.0), Reading("accel_device_down_reason_info", (*A, "device_missing"), 1.0)]
    rec = record(down)
    f = finding(rec, "device_down")
    assert (f.action, f.scope, rec.scope) == ("reboot_node", "node", "node")


def test_intel_uncorrectable_compute_errors_that_grow_ask_a_reset_then_the_vendor():
    judge = HealthJudge(wall=lambda: NOW, boot_time=lambda: 0.0)

    def ras(category, count):
        return Reading("accel_intel_ras_uncorrectable_errors_total", (*A, category), count)

    first = judge.judge([up(), ras("compute", 2.0), ras("display", 1.0)])
    assert first[0].action == "none"  # the first count is the baseline
    (rec,) = judge.judge([up(), ras("compute", 3.0), ras("display", 5.0)])
    assert rec.reason_states() == {"ras_compute": "failed"}  # display asks nothing
    f = finding(rec, "ras_compute")
    assert (f.action, f.escalation, f.provenance) == (
        "reset_device",
        "contact_vendor",
        "exporter_rule",
    )
    # Remembered for the window, as an event the state file keeps.
    (again,) = judge.judge([up(), ras("compute", 3.0)])
    assert again.action == "reset_device"
    assert judge.remembered()[A[1]].events == {("ras", "ras_compute"): NOW}
