"""The vendor-neutral health verdict: each rule, the worst state winning, the memory."""

from __future__ import annotations

import pytest

from exporter.health import HealthJudge
from exporter.model import Reading

A = ("0", "GPU-a")
B = ("1", "GPU-b")


def up(ident=A, value=1.0):
    return Reading("accel_device_up", ident, value)


def verdicts(readings, judge=None):
    out = (judge or HealthJudge()).judge(readings)
    assert out[: len(readings)] == list(readings)  # the readings pass through unchanged
    states = {}
    reasons = {}
    for r in out[len(readings) :]:
        if r.metric == "accel_device_health":
            if r.value == 1:
                assert r.labels[:2] not in states, "one-hot"
                states[r.labels[:2]] = r.labels[2]
        else:
            assert r.metric == "accel_device_health_reason_info" and r.value == 1
            reasons.setdefault(r.labels[:2], set()).add(r.labels[2])
    return states, reasons


def test_every_state_is_exported_one_hot_for_each_device():
    out = HealthJudge().judge([up(A), up(B)])
    health = [r for r in out if r.metric == "accel_device_health"]
    assert sorted(r.labels for r in health) == sorted(
        (*ident, s) for ident in (A, B) for s in ("ok", "degraded", "failed", "predicted_failure")
    )
    assert sum(r.value for r in health) == 2
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
        Reading("accel_device_recovery_action", (*A, "drain_p2p"), 1.0),
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


@pytest.mark.parametrize(("kind", "counter"), [("uncorrected", "volatile"), ("uncorrectable", "")])
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
    out = HealthJudge().judge([Reading("accel_power_watts", A, 1.0)])
    assert [r.metric for r in out] == ["accel_power_watts"]


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
        (afid("12", "non_fatal_corrected", 60), "degraded", {"afid_recent"}),
        (afid("12", "non_fatal_uncorrected", 60), "degraded", {"afid_recent"}),
        (afid("30", "fatal", 7200), "ok", set()),
        (afid("12", "non_fatal_corrected", 7200), "ok", set()),
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
    corrected = afid("12", "non_fatal_corrected", 0)
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
