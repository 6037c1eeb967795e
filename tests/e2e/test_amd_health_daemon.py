"""The AMD health rules through the daemon: AFIDs and bad pages move the verdict."""

from __future__ import annotations

import time
from typing import Any

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
    state.cper(dev, [(state.SEV_NON_FATAL_CORRECTED, [12]), (state.SEV_FATAL, [30])])
    dev.cper_time0 = now - 60
    dev.cper_count = 1  # the corrected record only
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
