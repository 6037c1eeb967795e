"""Error rates through the real health judge: degraded or predicted, never failed; the registry."""

from __future__ import annotations

from exporter import health, noisy_signals, trend
from exporter.health import HealthJudge
from exporter.model import Reading

A = ("0", "GPU-a")
B = ("1", "GPU-b")
NOW = 1_800_000_000.0


class Clock:
    """Monotonic and wall time that the test moves (one poll a minute)."""

    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return NOW + self.t


def info(ident=A, vendor="nvidia", driver="570.86.15") -> Reading:
    labels = [""] * 16
    labels[0], labels[1], labels[2], labels[7] = vendor, ident[0], ident[1], driver
    return Reading("accel_device_info", tuple(labels), 1.0)


def nvlink(ident, kind: str, count: float, link: str = "0") -> Reading:
    return Reading("accel_nvlink_errors_total", (*ident, link, kind), float(count))


def polls(judge: HealthJudge, clock: Clock, per_minute: dict, minutes: int, extra=()):
    """``minutes`` polls a minute apart, each counter growing by its ``per_minute``."""
    counts = dict.fromkeys(per_minute, 0.0)
    records = ()
    for _ in range(minutes + 1):
        readings = [Reading("accel_device_up", A, 1.0), Reading("accel_device_up", B, 1.0)]
        readings += [info(A), info(B), *extra]
        for (ident, kind), count in counts.items():
            readings.append(nvlink(ident, kind, count))
        records = judge.judge(readings)
        for key, grow in per_minute.items():
            counts[key] += grow
        clock.t += 60.0
    return {(r.device, r.uuid): r for r in records}


def judge_and_clock() -> tuple[HealthJudge, Clock]:
    clock = Clock()
    return HealthJudge(clock=clock.mono, wall=clock.wall, boot_time=lambda: 0.0), clock


def test_nvlink_replays_above_the_threshold_degrade_and_below_leave_ok():
    judge, clock = judge_and_clock()
    # GPU a: 2 replays a minute (DCGM's limit is 1); GPU b: none.
    got = polls(judge, clock, {(A, "replay"): 2, (B, "replay"): 0}, minutes=2)
    assert got[A].state == "ok"  # two windows above: not yet
    judge, clock = judge_and_clock()
    got = polls(judge, clock, {(A, "replay"): 2, (B, "replay"): 0}, minutes=3)
    assert got[A].state == "degraded" and got[A].reason_states() == {
        "nvlink_error_rate": "degraded"
    }
    (finding,) = got[A].findings
    assert (finding.reason, finding.action, finding.escalation, finding.provenance) == (
        "nvlink_error_rate",
        "none",
        "service",
        "vendor_catalog",
    )
    assert "0.0333/s" in finding.detail and "3 windows of 60 s" in finding.detail
    assert "DcgmGPUHardwareLimits" in finding.reference
    assert got[B].state == "ok" and got[B].findings == ()


def test_a_replay_storm_never_fails_the_gpu_and_clears_after_quiet_windows():
    judge, clock = judge_and_clock()
    got = polls(judge, clock, {(A, "recovery"): 10_000}, minutes=6)
    assert got[A].state == "degraded"
    assert "failed" not in got[A].reason_states().values()
    out = health.readings(got.values())
    assert ("0", "GPU-a", "nvlink_error_rate") in {
        r.labels for r in out if r.metric == "accel_device_health_reason_info"
    }
    # Quiet now: the count stays where it is; three windows below clear it.
    held = [nvlink(A, "recovery", 60_000.0)]
    states = []
    for _ in range(4):
        records = judge.judge([Reading("accel_device_up", A, 1.0), info(A), *held])
        states.append(records[0].state)
        clock.t += 60.0
    assert states == ["degraded", "degraded", "ok", "ok"]


def test_the_registry_takes_the_nvlink_crc_verdict_away_and_counts_it():
    judge, clock = judge_and_clock()
    # 200 CRC errors a second: twice DCGM's CRC limit, for five minutes.
    got = polls(judge, clock, {(A, "crc_flit"): 200 * 60}, minutes=5)
    assert got[A].state == "ok" and got[A].findings == ()
    assert got[A].downgraded == (("nvlink_crc", "dcgm_4_7_nvlink_ber", 1.0),)
    out = [r for r in health.readings(got.values()) if "downgraded" in r.metric]
    assert [(r.labels, r.value) for r in out] == [((*A, "nvlink_crc", "dcgm_4_7_nvlink_ber"), 1.0)]
    # Without the registry the same rate is a prediction (the rule itself is kept).
    judge2, clock2 = judge_and_clock()
    judge2.trends = trend.DeviceTrends(registry=())
    got = polls(judge2, clock2, {(A, "crc_flit"): 200 * 60}, minutes=3)
    assert got[A].reason_states() == {"nvlink_crc_rate": "predicted_failure"}


REGISTRY = noisy_signals.load(
    """
entries:
  - id: old_driver_replays
    signals: [nvlink_replay]
    effect: predicted
    when: {version_below: {fact: driver_version, value: "575", vendor: nvidia}}
    statement: test
    reference: test
"""
)


def test_a_version_entry_lowers_degraded_to_predicted_on_old_drivers_only():
    for driver, state, counted in (
        ("570.86.15", "predicted_failure", 1.0),
        ("580.1", "degraded", 0),
    ):
        judge, clock = judge_and_clock()
        judge.trends = trend.DeviceTrends(registry=REGISTRY)
        got = {}
        for _ in range(4):
            count = clock.t / 60 * 5
            readings = [Reading("accel_device_up", A, 1.0), info(A, driver=driver)]
            records = judge.judge([*readings, nvlink(A, "replay", count)])
            got = {(r.device, r.uuid): r for r in records}
            clock.t += 60.0
        assert got[A].reason_states() == {"nvlink_error_rate": state}, driver
        assert (
            dict(((s, e), n) for s, e, n in got[A].downgraded).get(
                ("nvlink_replay", "old_driver_replays"), 0
            )
            == counted
        )


def test_unread_and_down_devices_get_no_trend_verdict_and_a_new_baseline():
    judge, clock = judge_and_clock()
    polls(judge, clock, {(A, "replay"): 5}, minutes=2)
    # Unread for a poll (its worker restarting): unknown, no trend reason.
    records = judge.judge([nvlink(A, "replay", 10_000)], unread={A: "worker restarting"})
    assert records[0].state == "unknown" and records[0].reason_states() == {}
    clock.t += 60.0
    # Back with a count far above the last one: the new baseline, not 20 000 errors
    # in a minute (which would have made the third window above in a row).
    for _ in range(3):
        records = judge.judge(
            [Reading("accel_device_up", A, 1.0), info(A), nvlink(A, "replay", 20_000)]
        )
        clock.t += 60.0
    assert records[0].state == "ok"


def amd(corrected_decoded: float, newest: float, count: float) -> list[Reading]:
    return [
        Reading("accel_device_up", A, 1.0),
        info(A, vendor="amd", driver="6.10.5"),
        Reading("accel_amd_corrected_afids_decoded", A, corrected_decoded),
        Reading("accel_amd_afid_errors_total", (*A, "17", "non_fatal_corrected"), count),
        Reading("accel_amd_afid_last_timestamp_seconds", (*A, "17"), newest),
    ]


def test_corrected_xgmi_afids_predict_unless_stale_or_undecoded():
    cases = {
        # fresh records on a library that decodes corrected AFIDs: a prediction
        "fresh": (1.0, 0.0, None),
        # records older than 15 minutes counted again (the CPER ring re-read): no verdict
        "stale": (1.0, -3600.0, "stale_cper"),
        # a library before 26.5.0: the counts are partial, no verdict
        "undecoded": (0.0, 0.0, "amdsmi_before_26_5_corrected_afids"),
    }
    for name, (decoded, age, entry) in cases.items():
        judge, clock = judge_and_clock()
        records = ()
        for minute in range(4):
            newest = clock.wall() + age
            records = judge.judge(amd(decoded, newest, float(minute * 3)))
            clock.t += 60.0
        (record,) = records
        if entry is None:
            assert record.reason_states() == {"xgmi_error_rate": "predicted_failure"}, name
            assert record.downgraded == (), name
        else:
            assert record.reason_states() == {}, name
            assert record.downgraded == (("amd_corrected_afid", entry, 1.0),), name
