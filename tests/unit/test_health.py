"""The vendor-neutral health verdict: each rule, the worst state winning, the memory."""

from __future__ import annotations

import pytest

from exporter import health
from exporter.health import HealthJudge
from exporter.model import Reading

A = ("0", "GPU-a")
B = ("1", "GPU-b")
C = ("2", "GPU-c")


def up(ident=A, value=1.0):
    return Reading("accel_device_up", ident, value)


def judged(readings, judge=None, unread=None):
    """(states, health reasons, recommended actions, action reasons) by device.

    Read from the health families the records give (health.readings), so the one
    function that derives them is checked with every rule.
    """
    records = (judge or HealthJudge()).judge(readings, unread)
    out = health.readings(records)
    states, reasons, todo, why = {}, {}, {}, {}
    for r in out:
        if r.metric in ("accel_device_health", "accel_device_recommended_action"):
            one_hot = states if r.metric == "accel_device_health" else todo
            if r.value == 1:
                assert r.labels[:2] not in one_hot, "one-hot"
                one_hot[r.labels[:2]] = r.labels[2]
        elif r.metric == "accel_device_action_reason_info":
            assert r.value == 1
            why.setdefault(r.labels[:2], {})[r.labels[2]] = r.labels[3]
        elif r.metric == "accel_device_action_scope_info":
            assert r.value == 1
        else:
            assert r.metric == "accel_device_health_reason_info" and r.value == 1
            reasons.setdefault(r.labels[:2], set()).add(r.labels[2])
    judged_devices = {(v.device, v.uuid) for v in records}
    assert set(todo) == judged_devices, "an action for every device judged"
    # A state for every device the exporter can vouch for, and for no other.
    assert set(states) == {(v.device, v.uuid) for v in records if v.known}
    return states, reasons, todo, why


def verdicts(readings, judge=None):
    return judged(readings, judge)[:2]


def test_every_state_is_exported_one_hot_for_each_device():
    out = health.readings(HealthJudge().judge([up(A), up(B)]))
    states = [r for r in out if r.metric == "accel_device_health"]
    assert sorted(r.labels for r in states) == sorted(
        (*ident, s) for ident in (A, B) for s in ("ok", "degraded", "failed", "predicted_failure")
    )
    assert sum(r.value for r in states) == 2
    assert not [r for r in out if r.metric == "accel_device_health_reason_info"]


@pytest.mark.parametrize(
    ("reading", "state", "reason"),
    [
        (up(A, 0.0), "failed", "device_down"),
        (
            Reading("accel_device_recovery_action", (*A, "node_reboot"), 1.0),
            "failed",
            "recovery_action",
        ),
        (
            Reading("accel_device_recovery_action", (*A, "gpu_reset"), 1.0),
            "failed",
            "recovery_action",
        ),
        (
            Reading("accel_device_recovery_action", (*A, "drain_and_reset"), 1.0),
            "failed",
            "recovery_action",
        ),
        (Reading("accel_remapped_rows_failure", A, 1.0), "failed", "row_remap_failure"),
        (Reading("accel_retired_pages_pending", A, 1.0), "failed", "retired_pages_pending"),
        (Reading("accel_remapped_rows_pending", A, 2.0), "degraded", "row_remap_pending"),
        (
            Reading("accel_nvidia_fabric_health_issue", (*A, "degraded_bandwidth"), 1.0),
            "degraded",
            "fabric_degraded",
        ),
        (Reading("accel_temperature_margin_celsius", A, 4.0), "degraded", "thermal_margin_low"),
        (Reading("accel_temperature_margin_celsius", A, -3.0), "degraded", "thermal_margin_low"),
        (
            Reading("accel_sram_ecc_threshold_exceeded", A, 1.0),
            "predicted_failure",
            "sram_ecc_threshold",
        ),
        (
            Reading("accel_retired_pages", (*A, "double_bit_ecc"), 60.0),
            "predicted_failure",
            "retired_pages_near_limit",
        ),
    ],
)
def test_each_rule(reading, state, reason):
    readings = [up(A), up(B), reading] if reading.metric != "accel_device_up" else [reading, up(B)]
    states, reasons = verdicts(readings)
    assert states == {A: state, B: "ok"}
    assert reasons == {A: {reason}}


@pytest.mark.parametrize(
    "reading",
    [
        Reading("accel_device_recovery_action", (*A, "none"), 1.0),
        Reading("accel_device_recovery_action", (*A, "node_reboot"), 0.0),
        Reading("accel_remapped_rows_pending", A, 0.0),
        Reading("accel_nvidia_fabric_health_issue", (*A, "route_recovery"), 0.0),
        Reading("accel_temperature_margin_celsius", A, 5.0),
        Reading("accel_retired_pages", (*A, "double_bit_ecc"), 59.0),
        Reading("accel_sram_ecc_threshold_exceeded", A, 0.0),
    ],
)
def test_values_that_are_fine(reading):
    assert verdicts([up(A), reading]) == ({A: "ok"}, {})


def test_retired_pages_of_both_causes_add_up():
    states, _ = verdicts(
        [
            up(A),
            Reading("accel_retired_pages", (*A, "double_bit_ecc"), 30.0),
            Reading("accel_retired_pages", (*A, "multiple_single_bit_ecc"), 30.0),
        ]
    )
    assert states == {A: "predicted_failure"}


def test_worst_state_wins_and_every_reason_is_listed():
    states, reasons = verdicts(
        [
            up(A),
            Reading("accel_temperature_margin_celsius", A, 1.0),
            Reading("accel_retired_pages", (*A, "double_bit_ecc"), 64.0),
            Reading("accel_device_recovery_action", (*A, "gpu_reset"), 1.0),
        ]
    )
    assert states == {A: "failed"}
    assert reasons == {A: {"thermal_margin_low", "retired_pages_near_limit", "recovery_action"}}
    states, _ = verdicts(
        [
            up(A),
            Reading("accel_temperature_margin_celsius", A, 1.0),
            Reading("accel_retired_pages", (*A, "double_bit_ecc"), 64.0),
        ]
    )
    assert states == {A: "degraded"}


@pytest.mark.parametrize("family", ["accel_nvlink_up", "accel_amd_xgmi_link_up"])
def test_a_link_down_that_was_up_is_degraded_a_link_never_up_is_not(family):
    judge = HealthJudge()
    first = [up(A), Reading(family, (*A, "0"), 1.0), Reading(family, (*A, "1"), 0.0)]
    assert verdicts(first, judge) == ({A: "ok"}, {})
    second = [up(A), Reading(family, (*A, "0"), 0.0), Reading(family, (*A, "1"), 0.0)]
    assert verdicts(second, judge) == ({A: "degraded"}, {A: {"link_down"}})
    assert verdicts(first, judge) == ({A: "ok"}, {})  # back up


@pytest.mark.parametrize(("kind", "counter"), [("uncorrected", "volatile"), ("uncorrected", "")])
def test_uncorrectable_ecc_growth_is_degraded_for_an_hour(kind, counter):
    now = [1000.0]
    judge = HealthJudge(clock=lambda: now[0])

    def ecc(n):
        return [up(A), up(B), Reading("accel_ecc_errors_total", (*A, kind, counter), n)]

    assert verdicts(ecc(3.0), judge)[0] == {A: "ok", B: "ok"}  # the first count: no growth
    assert verdicts(ecc(3.0), judge)[0] == {A: "ok", B: "ok"}
    now[0] += 10
    assert verdicts(ecc(5.0), judge) == ({A: "degraded", B: "ok"}, {A: {"ecc_uncorrected_growth"}})
    now[0] += 3599
    assert verdicts(ecc(5.0), judge)[0][A] == "degraded"
    now[0] += 2
    assert verdicts(ecc(5.0), judge)[0][A] == "ok"


def test_corrected_ecc_growth_is_not_degraded():
    judge = HealthJudge()
    verdicts([up(A), Reading("accel_ecc_errors_total", (*A, "corrected", "volatile"), 1.0)], judge)
    grown = [up(A), Reading("accel_ecc_errors_total", (*A, "corrected", "volatile"), 9.0)]
    assert verdicts(grown, judge)[0] == {A: "ok"}


def test_devices_without_an_up_series_get_no_verdict():
    assert HealthJudge().judge([Reading("accel_power_watts", A, 1.0)]) == ()


# -- AMD: AFIDs and bad pages -------------------------------------------------------

NOW = 1_800_000_000.0


def afid(code, severity, age, ident=A, count=1.0):
    return [
        Reading("accel_amd_afid_errors_total", (*ident, code, severity), count),
        Reading("accel_amd_afid_last_timestamp_seconds", (*ident, code), NOW - age),
    ]


def bad_pages(retired, pending=0.0, unreservable=0.0, threshold=None, ident=A):
    out = [
        Reading("accel_retired_pages", (*ident, ""), float(retired)),
        Reading("accel_retired_pages_pending", ident, 1.0 if pending else 0.0),
        Reading("accel_amd_bad_pages", (*ident, "pending"), float(pending)),
        Reading("accel_amd_bad_pages", (*ident, "unreservable"), float(unreservable)),
    ]
    if threshold is not None:
        out.append(Reading("accel_amd_bad_page_threshold", ident, float(threshold)))
    return out


def amd_judge(wall):
    return HealthJudge(clock=lambda: 0.0, wall=lambda: wall[0])


@pytest.mark.parametrize(
    ("readings", "state", "reasons"),
    [
        (afid("30", "fatal", 60), "failed", {"afid_fatal"}),
        # AMD's table: 12 is a boot-time failure (reboot_node), 24 a corrected HBM error
        # (counted, no action: ok), 22 an uncorrected non-fatal one (degraded).
        (afid("12", "fatal", 60), "failed", {"afid_fatal"}),
        (afid("24", "non_fatal_corrected", 60), "ok", set()),
        (afid("22", "non_fatal_uncorrected", 60), "degraded", {"afid_recent"}),
        (afid("30", "fatal", 7200), "ok", set()),
        (afid("22", "non_fatal_uncorrected", 7200), "ok", set()),
        (bad_pages(5, threshold=128), "ok", set()),
        (bad_pages(129, threshold=128), "failed", {"bad_pages_over_threshold"}),
        (bad_pages(120, threshold=128), "predicted_failure", {"bad_pages_near_threshold"}),
        # Pending AMD pages are retired at the next reset: degraded, not the NVIDIA
        # "retired_pages_pending" failure the shared family would give.
        (bad_pages(5, pending=2, threshold=128), "degraded", {"bad_pages_pending"}),
        # 60+ pages is no "near the limit" on AMD, whose limit is the threshold.
        (bad_pages(64, threshold=128), "ok", set()),
        (bad_pages(64), "ok", set()),
    ],
)
def test_amd_rules(readings, state, reasons):
    states, found = verdicts([up(A), *readings], amd_judge([NOW]))
    assert states[A] == state
    assert found.get(A, set()) == reasons


def test_amd_verdict_transitions_over_time():
    wall = [NOW]
    judge = amd_judge(wall)
    pages = bad_pages(3, threshold=128)
    assert verdicts([up(A), *pages], judge)[0][A] == "ok"
    corrected = afid("22", "non_fatal_uncorrected", 0)
    assert verdicts([up(A), *pages, *corrected], judge) == ({A: "degraded"}, {A: {"afid_recent"}})
    fatal = afid("30", "fatal", 0)
    states, reasons = verdicts([up(A), *pages, *corrected, *fatal], judge)
    assert states[A] == "failed" and reasons[A] == {"afid_fatal", "afid_recent"}
    pending = bad_pages(3, pending=1, threshold=128)
    wall[0] = NOW + 3601  # an hour on: the AFIDs no longer count, the pending page does
    assert verdicts([up(A), *pending, *corrected, *fatal], judge) == (
        {A: "degraded"},
        {A: {"bad_pages_pending"}},
    )
    assert verdicts([up(A), *pages, *corrected, *fatal], judge)[0][A] == "ok"


def test_xgmi_link_down_that_was_up_degrades_an_amd_gpu():
    judge = HealthJudge()
    link = ("accel_amd_xgmi_link_up", (*A, "3"))
    assert verdicts([up(A), Reading(*link, 1.0)], judge)[0][A] == "ok"
    assert verdicts([up(A), Reading(*link, 0.0)], judge) == ({A: "degraded"}, {A: {"link_down"}})


def test_nvidia_retired_pages_rules_still_apply_without_amd_families():
    pending = [Reading("accel_retired_pages_pending", A, 1.0)]
    assert verdicts([up(A), *pending])[0][A] == "failed"
    near = [Reading("accel_retired_pages", (*A, "double_bit_ecc"), 61.0)]
    assert verdicts([up(A), *near])[0][A] == "predicted_failure"


def test_recovery_action_drain_p2p_is_degraded_and_asks_to_drain():
    states, reasons, todo, why = judged(
        [up(A), Reading("accel_device_recovery_action", (*A, "drain_p2p"), 1.0)]
    )
    assert (states[A], reasons[A], todo[A]) == ("degraded", {"recovery_action"}, "drain_p2p")
    assert why[A] == {"recovery_action_drain_p2p": "drain_p2p"}


# -- XIDs and AFIDs: the recommended action, the window, resets -----------------------


def xid(code, at, ident=A, count=1.0):
    return [
        Reading("accel_xid_errors_total", (*ident, str(code)), count),
        Reading("accel_xid_last_timestamp_seconds", (*ident, str(code)), at),
    ]


def xid_judge(wall, **kw):
    return HealthJudge(clock=lambda: 0.0, wall=lambda: wall[0], boot_time=lambda: 0.0, **kw)


@pytest.mark.parametrize(
    ("code", "state", "action"),
    [
        # NVIDIA's catalog: immediate bucket RESTART_APP: the application failed, the GPU is fine.
        (31, "ok", "restart_app"),
        (94, "ok", "restart_app"),
        (13, "ok", "restart_app"),
        (48, "failed", "reset_device"),  # WORKFLOW_XID_48: reset first
        (79, "failed", "reboot_node"),  # RESTART_BM
        (95, "failed", "reset_device"),  # RESET_GPU
        (119, "failed", "reset_device"),  # RESET_GPU (GSP RPC timeout)
        (74, "failed", "reset_device"),  # WORKFLOW_NVLINK_ERR
        (63, "ok", "none"),  # IGNORE: a row remap recorded
        (54, "failed", "inspect_hardware"),  # CHECK_MECHANICALS
        (2, "failed", "contact_vendor"),  # "Unused": CONTACT_SUPPORT
        (168, "failed", "service"),  # no bucket in this catalog revision
        (4000, "failed", "service"),  # unknown: service, never none
    ],
)
def test_each_xid_maps_to_its_catalog_action(code, state, action):
    states, reasons, todo, why = judged([up(A), up(B), *xid(code, NOW - 5)], xid_judge([NOW]))
    assert states == {A: state, B: "ok"} and todo == {A: action, B: "none"}
    assert why[A] == {f"xid_{code}": action}
    assert reasons.get(A, set()) == ({f"xid_{code}"} if state != "ok" else set())


def test_the_device_action_is_the_most_disruptive_finding():
    readings = [up(A), *xid(31, NOW - 1), *xid(95, NOW - 2), *xid(79, NOW - 3)]
    readings.append(Reading("accel_remapped_rows_failure", A, 1.0))
    states, reasons, todo, why = judged(readings, xid_judge([NOW]))
    assert states[A] == "failed" and todo[A] == "replace_device"
    assert why[A] == {
        "xid_31": "restart_app",
        "xid_95": "reset_device",
        "xid_79": "reboot_node",
        "row_remap_failure": "replace_device",
    }
    assert reasons[A] == {"xid_95", "xid_79", "row_remap_failure"}


def test_an_xid_ages_out_by_its_own_time_not_by_when_it_was_read():
    wall = [NOW]
    judge = xid_judge(wall, window=600.0)
    # Read now, but the driver saw it 590 s ago: 10 s are left of its window.
    assert judged([up(A), *xid(79, NOW - 590)], judge)[0][A] == "failed"
    wall[0] = NOW + 11
    states, _reasons, todo, why = judged([up(A), *xid(79, NOW - 590)], judge)
    assert (states[A], todo[A], why.get(A)) == ("ok", "none", None)
    # The same code again, with a newer time: counts again.
    assert judged([up(A), *xid(79, NOW + 5)], judge)[2][A] == "reboot_node"


def test_an_xid_outlives_the_worker_that_counted_it():
    wall = [NOW]
    judge = xid_judge(wall)
    assert judged([up(A), *xid(48, NOW - 1)], judge)[0][A] == "failed"
    # A new worker counts from zero and reports no XID yet: the daemon remembers it.
    assert judged([up(A)], judge)[2][A] == "reset_device"


def test_a_reset_clears_what_a_reset_resolves_but_not_a_service_call():
    wall = [NOW]
    judge = xid_judge(wall)
    events = [*xid(95, NOW - 30), *xid(54, NOW - 30)]
    assert judged([up(A), *events], judge)[2][A] == "inspect_hardware"
    lost = [
        up(A, 0.0),
        Reading("accel_device_down_reason_info", (*A, "gpu_lost"), 1.0),
        *events,
    ]
    assert judged(lost, judge)[0][A] == "failed"
    wall[0] = NOW + 20
    _states, _, todo, why = judged([up(A), *events], judge)  # back: it was reset
    assert todo[A] == "inspect_hardware" and why[A] == {"xid_54": "inspect_hardware"}
    # A device down for a reason a reset does not imply (a hung call) clears nothing.
    judge = xid_judge(wall)
    hung = [up(A, 0.0), Reading("accel_device_down_reason_info", (*A, "timeout"), 1.0)]
    judged([*hung, *xid(95, NOW - 30)], judge)
    assert judged([up(A), *xid(95, NOW - 30)], judge)[1][A] == {"xid_95"}


def test_a_reboot_clears_events_from_before_the_boot():
    judge = HealthJudge(clock=lambda: 0.0, wall=lambda: NOW, boot_time=lambda: NOW - 100)
    readings = [up(A), *xid(79, NOW - 200), *xid(31, NOW - 200), *xid(54, NOW - 200)]
    assert judged(readings, judge)[3][A] == {"xid_54": "inspect_hardware"}


def test_xid_154_takes_the_recovery_action_field():
    field = Reading("accel_device_recovery_action", (*A, "gpu_reset"), 1.0)
    _, _, _todo, why = judged([up(A), field, *xid(154, NOW - 1)], xid_judge([NOW]))
    assert why[A] == {"xid_154": "reset_device", "recovery_action_gpu_reset": "reset_device"}
    # Without the field (an older driver): service, never none.
    assert judged([up(B), *xid(154, NOW - 1, B)], xid_judge([NOW]))[2][B] == "service"


def test_configured_actions_override_the_catalog():
    judge = xid_judge([NOW], xid_actions={"31": "reset_device"}, afid_actions={"12": "none"})
    readings = [up(A), *xid(31, NOW - 1), *afid("12", "non_fatal_corrected", 0)]
    assert judged(readings, judge)[3][A] == {"xid_31": "reset_device", "afid_12": "none"}


def test_afids_ask_what_amds_table_says_and_an_unknown_one_service():
    states, _reasons, todo, why = judged(
        [
            up(A),
            up(B),
            up(C),
            *afid("30", "fatal", 60),
            *afid("24", "non_fatal_corrected", 60, B),
            *afid("99", "non_fatal_corrected", 60, C),
        ],
        amd_judge([NOW]),
    )
    assert states == {A: "failed", B: "ok", C: "failed"}
    assert todo == {A: "replace_device", B: "none", C: "service"}
    assert why == {
        A: {"afid_30": "replace_device"},
        B: {"afid_24": "none"},
        C: {"afid_99": "service"},
    }


def test_a_fatal_afid_from_before_the_boot_no_longer_fails_the_gpu_it_was_reset_for():
    wall = [NOW]
    judge = HealthJudge(
        clock=lambda: 0.0,
        wall=lambda: wall[0],
        boot_time=lambda: NOW - 30,
        afid_actions={"30": "reset_device"},
    )
    # The record is 60 s old, the boot 30 s: the reboot reset the GPU (ROCm DME #506).
    assert judged([up(A), *afid("30", "fatal", 60)], judge)[0][A] == "ok"
    assert judged([up(A), *afid("30", "fatal", 10)], judge)[0][A] == "failed"


def test_the_latest_verdict_is_kept_with_its_findings_and_since():
    wall = [NOW]
    judge = xid_judge(wall)
    judge.judge([up(A)])
    assert judge.latest[A].state == "ok" and judge.latest[A].since == NOW
    wall[0] = NOW + 5
    judge.judge([up(A), *xid(79, NOW + 4)])
    got = judge.latest[A]
    assert (got.state, got.action, got.since, got.updated) == (
        "failed",
        "reboot_node",
        NOW + 5,
        NOW + 5,
    )
    (finding,) = got.findings
    assert (finding.immediate, finding.investigatory, finding.at) == (
        "RESTART_BM",
        "CONTACT_SUPPORT",
        NOW + 4,
    )
    wall[0] = NOW + 9
    judge.judge([up(A)])
    assert (judge.latest[A].since, judge.latest[A].updated) == (NOW + 5, NOW + 9)


# -- Unknown: the exporter's own trouble is no evidence about a device ----------------


def records(readings, judge, unread=None):
    return {(v.device, v.uuid): v for v in judge.judge(readings, unread)}


def down(ident, reason):
    return [up(ident, 0.0), Reading("accel_device_down_reason_info", (*ident, reason), 1.0)]


def test_a_poll_with_the_worker_down_gives_unknown_verdicts_and_no_failed():
    wall = [NOW]
    judge = xid_judge(wall)
    assert judged([up(A), up(B), *xid(79, NOW - 5)], judge)[0] == {A: "failed", B: "ok"}
    # The worker was killed: the source composes every device down with the worker's
    # reason, and names them unread. That is no device_down.
    wall[0] = NOW + 1
    composed = [*down(A, "timeout"), *down(B, "timeout")]
    unread = {A: "worker restarting: timeout", B: "worker restarting: timeout"}
    got = records(composed, judge, unread)
    assert {k: (v.state, v.unknown_why) for k, v in got.items()} == {
        A: ("unknown", "worker restarting: timeout"),
        B: ("unknown", "worker restarting: timeout"),
    }
    assert not any(v.known for v in got.values())
    # What is remembered is still listed with its action: the XID of A, nothing for B.
    assert (got[A].reason_names(), got[A].action) == (("xid_79",), "reboot_node")
    assert [f.reason for f in got[A].findings] == ["xid_79"]
    assert (got[B].reasons, got[B].findings, got[B].action) == ((), (), "none")
    # On /metrics: none of the four states holds; the reasons and action remembered.
    states, reasons, todo, why = judged(composed, judge, unread)
    assert states == {} and reasons == {A: {"xid_79"}}
    assert todo == {A: "reboot_node", B: "none"} and why == {A: {"xid_79": "reboot_node"}}
    out = health.readings(got.values())
    health_series = [r for r in out if r.metric == "accel_device_health"]
    assert len(health_series) == 8 and all(r.value == 0 for r in health_series)
    assert "device_down" not in {r.labels[2] for r in out if r.metric.endswith("reason_info")}


def test_the_worker_reporting_a_device_down_is_still_failed():
    judge = HealthJudge()
    # The worker answered: A is lost (its own per-device "up": false), B is fine.
    got = records([*down(A, "gpu_lost"), up(B)], judge)
    assert (got[A].state, got[A].reason_names(), got[A].action) == (
        "failed",
        ("device_down",),
        "reset_device",
    )
    assert got[B].state == "ok" and got[A].known


def test_an_isolated_device_is_failed_on_its_isolation_even_with_the_worker_down():
    judge = HealthJudge()
    isolated = [
        *down(A, "hung"),
        Reading("accel_device_isolated_info", (*A, "hung", "nvmlDeviceGetPowerUsage"), 1.0),
    ]
    # B not read (the new worker, without A, is starting): unknown; A failed, the culprit.
    got = records([*isolated, *down(B, "hung")], judge, {B: "worker restarting: hung"})
    assert (got[A].state, got[A].reason_names(), got[A].action) == (
        "failed",
        ("isolated",),
        "reset_device",
    )
    assert (got[B].state, got[B].reasons) == ("unknown", ())


def test_unread_readings_teach_the_memory_nothing():
    judge = HealthJudge()
    link = ("accel_nvlink_up", (*A, "0"))
    ecc = ("accel_ecc_errors_total", (*A, "uncorrected", "volatile"))
    assert verdicts([up(A), Reading(*link, 1.0), Reading(*ecc, 2.0)], judge)[0] == {A: "ok"}
    # Carried readings of a device not read (a link 0, a bigger count): neither a link
    # down nor ECC growth, and not the baseline of the next reading either.
    carried = [up(A), Reading(*link, 0.0), Reading(*ecc, 9.0)]
    assert records(carried, judge, {A: "worker starting"})[A].reasons == ()
    assert verdicts([up(A), Reading(*link, 1.0), Reading(*ecc, 2.0)], judge) == ({A: "ok"}, {})


def test_a_driver_reload_seen_while_unread_still_clears_what_a_reset_resolves():
    wall = [NOW]
    judge = xid_judge(wall)
    assert judged([up(A), *xid(95, NOW - 30)], judge)[2][A] == "reset_device"
    # The bootstrap fails for driver_not_loaded: unknown (not failed), and the reload...
    got = records(down(A, "driver_not_loaded"), judge, {A: "worker restarting: driver_not_loaded"})
    assert got[A].state == "unknown" and got[A].action == "reset_device"
    wall[0] = NOW + 10
    # ...is a reset once the device answers again: XID 95 (reset_device) is resolved.
    assert judged([up(A), *xid(95, NOW - 30)], judge)[:3] == ({A: "ok"}, {}, {A: "none"})


def test_since_follows_the_state_through_unknown():
    wall = [NOW]
    judge = xid_judge(wall)
    assert records([up(A)], judge)[A].since == NOW
    wall[0] = NOW + 5
    gone = records(down(A, "crashed"), judge, {A: "worker restarting: crashed"})[A]
    assert (gone.state, gone.since, gone.updated) == ("unknown", NOW + 5, NOW + 5)
    wall[0] = NOW + 9
    back = records([up(A)], judge)[A]
    assert (back.state, back.since, back.updated) == ("ok", NOW + 9, NOW + 9)
