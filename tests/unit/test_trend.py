"""The consecutive-window rate tracker: thresholds, streaks, baselines, pruning, the rules."""

from __future__ import annotations

import pytest

from exporter import trend
from exporter.actions import Advice
from exporter.model import Reading
from exporter.trend import RuleError, TrendRule, TrendTracker

A = ("0", "GPU-a")
B = ("1", "GPU-b")
FAMILY = "accel_nvlink_errors_total"


def rule(**more) -> TrendRule:
    """A rule on NVLink replays: 1 a second, windows of 10 s, raise after 3, clear after 2."""
    args = {
        "reason": "nvlink_error_rate",
        "signal": "nvlink_replay",
        "family": FAMILY,
        "threshold_per_s": 1.0,
        "state": "degraded",
        "advice": Advice("none", reference="test"),
        "match": (("type", ("replay",)),),
        "length_s": 10.0,
        "raise_windows": 3,
        "clear_windows": 2,
    }
    args.update(more)
    return TrendRule(**args)


def replays(count: float, ident=A, link="0", kind="replay") -> Reading:
    return Reading(FAMILY, (*ident, link, kind), float(count))


def run(tracker: TrendTracker, per_window: list[float], start: float = 0.0, t0: float = 0.0):
    """Feed one reading per 10 s window growing by each of ``per_window``; hits after each."""
    count, now, out = start, t0, []
    tracker.observe([replays(count)], now)
    for grow in per_window:
        count += grow
        now += 10.0
        out.append(tracker.observe([replays(count)], now))
    return out


def test_three_windows_at_the_threshold_raise_and_two_below_clear():
    tracker = TrendTracker((rule(),))
    # 10 per 10 s window is 1/s, at the threshold; 9 is below.
    hits = run(tracker, [10, 10, 10, 10, 9, 10, 9, 9, 10])
    active = [bool(h) for h in hits]
    assert active == [False, False, True, True, True, True, True, False, False]
    raised = [h[0].raised for h in hits if h]
    assert raised == [True, False, False, False, False]  # raised once, on the third window
    first = hits[2][0]
    assert (first.subject, first.labels, first.rate, first.threshold) == (
        A,
        (*A, "0", "replay"),
        1.0,
        1.0,
    )


def test_windows_below_the_threshold_raise_nothing_and_a_broken_streak_starts_over():
    tracker = TrendTracker((rule(),))
    assert not any(run(tracker, [9, 9, 9, 9, 9, 9]))
    tracker = TrendTracker((rule(),))
    # Two above, one below, two above: never three in a row.
    assert not any(run(tracker, [20, 20, 5, 20, 20]))


def test_only_the_matched_label_values_count():
    tracker = TrendTracker((rule(),))
    now = 0.0
    for count in range(0, 500, 100):
        assert tracker.observe([replays(count, kind="crc_flit")], now) == []
        now += 10
    assert len(tracker) == 0


def test_a_counter_going_backwards_is_a_new_baseline_never_a_negative_rate():
    tracker = TrendTracker((rule(),))
    for now, count in ((0, 1000), (10, 1010), (20, 1020)):
        assert tracker.observe([replays(count)], float(now)) == []
    assert [h.rate for h in tracker.observe([replays(1030)], 30.0)] == [1.0]  # raised
    # A driver reload: the counter restarts from zero. No window closes on it, and the
    # windows after it are measured from the new baseline: still 1/s, still raised (a
    # negative rate would count as below and clear it after two windows).
    assert [h.rate for h in tracker.observe([replays(3)], 35.0)] == [1.0]
    for now, count in ((45, 13), (55, 23), (65, 33)):
        hits = tracker.observe([replays(count)], float(now))
        assert [(h.rate, h.raised) for h in hits] == [(1.0, False)]


def test_a_restarted_device_starts_a_new_baseline():
    tracker = TrendTracker((rule(),))
    tracker.observe([replays(0)], 0.0)
    tracker.observe([replays(10)], 10.0)
    # Down for a poll: its counter after the restart may already have climbed past
    # the old one; it is not compared with it.
    assert tracker.observe([], 20.0, restarted={A}) == []
    assert tracker.observe([replays(5000)], 30.0) == []  # the new baseline
    # The streak from before holds (one window above): the second comes at 40 s, the
    # third, which raises the rule, at 50 s.
    assert tracker.observe([replays(5010)], 40.0) == []
    hits = tracker.observe([replays(5020)], 50.0)
    assert [h.rate for h in hits] == [1.0]


def test_series_gone_are_pruned_and_their_hits_with_them():
    r = rule()
    tracker = TrendTracker((r,))
    now = 0.0
    for count in range(0, 50, 10):
        tracker.observe([replays(count), replays(0, ident=B)], now)
        now += 10
    assert len(tracker) == 2 and tracker.observe([replays(50)], now)
    # B is gone from every poll; A stays.
    horizon = r.forget_after_s
    assert horizon == 10.0 * (3 + trend.FORGET_WINDOWS)
    later = now + horizon + 1
    count = 50
    while now < later:
        now += 10
        count += 10
        tracker.observe([replays(count)], now)
    assert tracker.subjects() == {A}
    # A gone too: nothing held, nothing raised.
    assert tracker.observe([], now + horizon + 1) == [] and len(tracker) == 0


def test_pcie_rules_scale_the_threshold_by_the_link_as_dcgm_does():
    r = TrendRule(
        reason="pcie_replay_rate",
        signal="pcie_replay",
        family="accel_pcie_replays_total",
        threshold_per_s=0.001,
        state="degraded",
        advice=Advice("none", reference="test"),
        length_s=60.0,
        raise_windows=1,
        scale="pcie_link",
    )
    tracker = TrendTracker((r,))

    def poll(count: float, now: float, gen: float = 5.0, width: float = 16.0):
        return tracker.observe(
            [
                Reading("accel_pcie_replays_total", A, float(count)),
                Reading("accel_pcie_link_generation", A, gen),
                Reading("accel_pcie_link_width", A, width),
            ],
            now,
        )

    poll(0, 0.0)
    # Gen5 x16: DCGM allows ceil(0.06 x 32 x 16) = 31 a minute and warns on more.
    assert poll(31, 60.0) == []
    hits = poll(63, 120.0)
    assert [(round(h.threshold * 60), round(h.rate * 60)) for h in hits] == [(32, 32)]
    # The same 31 a minute on a link trained at Gen4 x8 is far above its 8 a minute.
    assert trend.pcie_factor(4, 8) == 128.0
    # Without the link's generation and width there is no check (as in DCGM).
    tracker2 = TrendTracker((r,))
    tracker2.observe([Reading("accel_pcie_replays_total", A, 0.0)], 0.0)
    assert tracker2.observe([Reading("accel_pcie_replays_total", A, 9e9)], 60.0) == []


def test_a_rule_asking_failed_is_refused_at_load():
    with pytest.raises(RuleError, match="failed refused"):
        rule(state="failed")
    text = """
rules:
  - reason: r
    signal: s
    family: accel_nvlink_errors_total
    threshold: {count: 1, per_s: 60}
    state: failed
    advice: {action: none, reference: x}
"""
    with pytest.raises(RuleError, match="failed refused"):
        trend.load_rules(text)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"threshold_per_s": 0.0}, "positive rate"),
        ({"raise_windows": 0}, "counts >= 1"),
        ({"family": "accel_no_such_family_total"}, "not in the catalog"),
        ({"match": (("colour", ("red",)),)}, "no label colour"),
        ({"advice": Advice("nuke", reference="x")}, "vocabulary"),
        ({"scale": "moon"}, "scale"),
    ],
)
def test_bad_rules_are_refused_with_their_reason(change, words):
    with pytest.raises(RuleError, match=words):
        rule(**change)


def test_the_shipped_rules_load_and_none_leads_to_failed():
    assert trend.RULES
    assert {r.state for r in trend.RULES} <= {"degraded", "predicted_failure"}
    # Every rule names where its numbers come from.
    assert all(r.source and r.advice.reference for r in trend.RULES)
    reasons = {r.reason for r in trend.DEVICE_RULES}
    assert {"nvlink_error_rate", "xgmi_error_rate", "pcie_replay_rate"} <= reasons
