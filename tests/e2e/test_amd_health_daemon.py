"""The AMD health rules through the daemon: AFIDs and bad pages move the verdict."""

from __future__ import annotations

import time
from typing import Any

from exporter.catalog.vocabulary import RECOMMENDED_ACTIONS
from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.daemon import Daemon, samples, value

CONFIG = {
    "sources": {
        "host": {"enabled": False},
        "nvml": {"enabled": False},
        "amdsmi": {"interval": "1s", "slow_interval": "1s", "timeout": "5s"},
    }
}


def state_of(d: Daemon, me: dict[str, str]) -> str:
    got = samples(d.metrics())
    for s in ("ok", "degraded", "failed", "predicted_failure"):
        if value(got, "accel_device_health", state=s, **me) == 1:
            return s
    return ""


def reasons_of(d: Daemon, me: dict[str, str]) -> set[str]:
    return {
        dict(labels)["reason"]
        for (name, labels), v in samples(d.metrics()).items()
        if name == "accel_device_health_reason_info" and ("uuid", me["uuid"]) in labels
    }


def test_amd_verdict_follows_afids_and_bad_pages(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    dev = amdsmi_fake.device(4)
    me = {"device": "4", "uuid": expected.uuid(dev)}
    d: Daemon = daemon_factory(config=CONFIG, env=amdsmi_env)
    d.wait_for(lambda: state_of(d, me) == "ok", 30, what="ok")
    dev.bad_pages[1] = 2  # pending: retired at the next reset
    d.wait_for(lambda: reasons_of(d, me) == {"bad_pages_pending"}, 30, what="pending")
    assert state_of(d, me) == "degraded"
    dev.bad_pages[1] = 0
    d.wait_for(lambda: state_of(d, me) == "ok", 30, what="ok again")
    now = int(time.time())
    # 22: HBM on-die ECC, uncorrected non-fatal (AMD's table): degraded; then 30: fatal.
    state.cper(dev, [(state.SEV_NON_FATAL_UNCORRECTED, [22]), (state.SEV_FATAL, [30])])
    dev.cper_time0 = now - 60
    dev.cper_count = 1  # the non-fatal record only
    d.wait_for(lambda: reasons_of(d, me) == {"afid_recent"}, 30, what="afid_recent")
    assert state_of(d, me) == "degraded"
    dev.cper_count = 2  # then the fatal one
    d.wait_for(lambda: state_of(d, me) == "failed", 30, what="failed")
    assert reasons_of(d, me) == {"afid_recent", "afid_fatal"}
    dev.bad_pages[0] = dev.bad_page_threshold + 1
    d.wait_for(lambda: "bad_pages_over_threshold" in reasons_of(d, me), 30, what="over")
    for other in (0, 1, 2, 3, 5, 6, 7):
        assert (
            state_of(d, {"device": str(other), "uuid": expected.uuid(amdsmi_fake.device(other))})
            == "ok"
        )


# The brief's AFIDs, one GPU each (the twelfth has none): what the daemon's verdict says.
# (afid, CPER severity, state, action, scope, escalation, provenance); a replacement
# reaches the GPU's partitions (the GPU alone: none here is partitioned).
UMC_FATAL = 40769 + 128 + 0  # MI450-class: umc bank base + fatal + error code 0
ROWS: list[tuple[int, int, str, str, str, str, str]] = [
    (13, state.SEV_NON_FATAL_CORRECTED, "ok", "none", "device", "", "exporter_rule"),
    (
        18,
        state.SEV_FATAL,
        "failed",
        "inspect_hardware",
        "baseboard",
        "replace_device",
        "vendor_inferred",
    ),
    (19, state.SEV_FATAL, "failed", "replace_device", "partition", "", "vendor_inferred"),
    (20, state.SEV_FATAL, "failed", "replace_device", "partition", "", "vendor_inferred"),
    (24, state.SEV_NON_FATAL_CORRECTED, "ok", "none", "device", "", "exporter_rule"),
    (26, state.SEV_FATAL, "failed", "reboot_node", "node", "replace_device", "vendor_inferred"),
    (27, state.SEV_FATAL, "failed", "reboot_node", "node", "replace_device", "vendor_inferred"),
    (30, state.SEV_FATAL, "failed", "replace_device", "partition", "", "vendor_inferred"),
    (34, state.SEV_FATAL, "failed", "reboot_node", "node", "contact_vendor", "vendor_inferred"),
    (16999, state.SEV_FATAL, "failed", "reboot_node", "node", "contact_vendor", "vendor_inferred"),
    (UMC_FATAL, state.SEV_FATAL, "failed", "replace_device", "partition", "", "vendor_inferred"),
]


def action_of(d: Daemon, me: dict[str, str]) -> str:
    got = samples(d.metrics())
    for a in RECOMMENDED_ACTIONS:
        if value(got, "accel_device_recommended_action", action=a, **me) == 1:
            return a
    return ""


def findings_of(d: Daemon, me: dict[str, str]) -> dict[str, tuple[str, str, str, str]]:
    return {
        dict(labels)["reason"]: tuple(
            dict(labels)[k] for k in ("action", "scope", "escalation", "provenance")
        )
        for (name, labels), v in samples(d.metrics()).items()
        if name == "accel_device_action_reason_info" and ("uuid", me["uuid"]) in labels
    }


def test_each_afid_of_the_fake_gets_the_tables_action_state_and_scope(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    now = int(time.time())
    amdsmi_fake.state.device_count = 12
    for i in range(8, 12):
        state.mi300x(amdsmi_fake.device(i), i)
    for i, (afid, severity, *_rest) in enumerate(ROWS):
        dev = amdsmi_fake.device(i)
        state.cper(dev, [(severity, [afid])], count=1)
        dev.cper_time0 = now - 30
    me = [{"device": str(i), "uuid": expected.uuid(amdsmi_fake.device(i))} for i in range(12)]
    d: Daemon = daemon_factory(config=CONFIG, env=amdsmi_env)
    last = len(ROWS) - 1
    d.wait_for(lambda: state_of(d, me[last]) == "failed", 40, what="the last AFID judged")
    got = samples(d.metrics())
    for i, (afid, _sev, verdict, action, scope, escalation, provenance) in enumerate(ROWS):
        assert state_of(d, me[i]) == verdict, afid
        assert action_of(d, me[i]) == action, afid
        assert findings_of(d, me[i]) == {f"afid_{afid}": (action, scope, escalation, provenance)}
        info = [
            dict(labels)
            for (name, labels), v in got.items()
            if name == "accel_amd_afid_info" and ("uuid", me[i]["uuid"]) in labels
        ]
        assert [x["afid"] for x in info] == [str(afid)], afid
        want_classified = "false" if afid in (34, 16999) else "true"
        assert info[0]["classified"] == want_classified, afid
    assert state_of(d, me[11]) == "ok" and action_of(d, me[11]) == "none"
    umc = {
        dict(labels)["severity"]: dict(labels)["category"]
        for (name, labels), v in got.items()
        if name == "accel_amd_afid_info" and ("afid", str(UMC_FATAL)) in labels
    }
    assert umc == {"fatal": "MI450-class GPU bank umc"}
    assert value(got, "accel_amd_corrected_afids_decoded", **me[0]) == 1


def test_before_amdsmi_26_5_corrected_afids_are_unknown_not_zero(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    amdsmi_fake.state.lib_version[:] = (25, 7, 0)
    dev = amdsmi_fake.device(2)
    state.cper(dev, [(state.SEV_NON_FATAL_CORRECTED, [24]), (state.SEV_FATAL, [30])], count=2)
    dev.cper_time0 = int(time.time()) - 30
    me = {"device": "2", "uuid": expected.uuid(dev)}
    d: Daemon = daemon_factory(config=CONFIG, env=amdsmi_env)
    d.wait_metric("accel_amd_afid_errors_total", 1, afid="30", severity="fatal", **me)
    got = samples(d.metrics())
    assert value(got, "accel_amd_corrected_afids_decoded", **me) == 0
    # No corrected count at all (not a zero): the corrected record is counted as skipped.
    corrected = [
        labels
        for (name, labels), v in got.items()
        if name == "accel_amd_afid_errors_total" and ("severity", "non_fatal_corrected") in labels
    ]
    assert corrected == []
    skipped = value(
        got, "accel_amd_cper_records_skipped_total", reason="corrected_afids_not_decoded", **me
    )
    assert skipped == 1
