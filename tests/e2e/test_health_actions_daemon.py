"""Recommended actions through the real daemon: XIDs from the fake NVML, AFIDs from the
fake amdsmi, each mapped by its catalog, and the verdict that follows."""

from __future__ import annotations

import time
from typing import Any

from exporter.catalog.vocabulary import RECOMMENDED_ACTIONS
from tests.e2e.test_nvml_daemon import nvml_config
from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.daemon import Daemon, samples, value

ACTIONS = RECOMMENDED_ACTIONS
STATES = ("ok", "degraded", "failed", "predicted_failure")

# GPU index -> (XID, the verdict and the action NVIDIA's catalog gives it).
XIDS = {
    0: (31, "ok", "restart_app"),  # MMU fault: RESTART_APP
    1: (48, "failed", "reset_device"),  # double-bit ECC: WORKFLOW_XID_48, a reset first
    2: (79, "failed", "reboot_node"),  # fallen off the bus: RESTART_BM
    3: (94, "ok", "restart_app"),  # contained ECC error: RESTART_APP
    4: (95, "failed", "reset_device"),  # uncontained ECC error: RESET_GPU
    5: (119, "failed", "reset_device"),  # GSP RPC timeout: RESET_GPU
}


def one_hot(got: Any, family: str, names: tuple[str, ...], **me: str) -> str:
    """The label value whose series is 1 (and check the others are 0)."""
    hot = [n for n in names if value(got, family, **{family_label(family): n}, **me) == 1]
    cold = [n for n in names if value(got, family, **{family_label(family): n}, **me) == 0]
    assert len(hot) == 1 and len(cold) == len(names) - 1, (family, me, hot, cold)
    return hot[0]


def family_label(family: str) -> str:
    return "state" if family == "accel_device_health" else "action"


def reasons(got: Any, uuid: str) -> dict[str, str]:
    """The action reasons of one device: reason -> action."""
    return {
        dict(labels)["reason"]: dict(labels)["action"]
        for (name, labels), v in got.items()
        if name == "accel_device_action_reason_info" and ("uuid", uuid) in labels and v == 1
    }


def test_each_xid_gets_its_catalog_action_and_verdict(daemon_factory: Any, fake_nvml: Any) -> None:
    fake = fake_nvml(7)
    d: Daemon = daemon_factory(nvml_config(), env=fake.env())
    me = [{"device": str(i), "uuid": fake.uuid(i)} for i in range(7)]
    d.wait_metric("accel_device_recommended_action", 1, action="none", **me[6])
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
    for gpu, (code, _, _) in XIDS.items():
        fake.inject_xid(gpu, code)
    d.wait_metric("accel_device_recommended_action", 1, action="reset_device", **me[5])
    got = samples(d.metrics())
    for gpu, (code, verdict, action) in XIDS.items():
        assert one_hot(got, "accel_device_health", STATES, **me[gpu]) == verdict, gpu
        assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[gpu]) == action
        assert reasons(got, me[gpu]["uuid"]) == {f"xid_{code}": action}
        failed = value(got, "accel_device_health_reason_info", reason=f"xid_{code}", **me[gpu])
        assert failed == (1 if verdict == "failed" else None)
    # The GPU without an XID: ok, nothing to do, no reason.
    assert one_hot(got, "accel_device_health", STATES, **me[6]) == "ok"
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[6]) == "none"
    assert reasons(got, me[6]["uuid"]) == {}
    # An application error on a failed GPU: the reset is still what it needs.
    fake.inject_xid(1, 13)
    d.wait_for(lambda: "xid_13" in reasons(samples(d.metrics()), me[1]["uuid"]), what="xid 13")
    got = samples(d.metrics())
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[1]) == "reset_device"


AMD_CONFIG = {
    "sources": {
        "host": {"enabled": False},
        "nvml": {"enabled": False},
        "amdsmi": {"interval": "1s", "slow_interval": "1s", "timeout": "5s"},
    },
    # Ten minutes, and AFID 12 (a boot-time failure: reboot_node) configured as harmless.
    "health": {"event_window": "10m", "afid_actions": {"12": "none"}},
}


def test_afids_fatal_and_not_and_one_older_than_the_window(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    now = int(time.time())
    fatal, corrected, old, unknown = (amdsmi_fake.device(i) for i in range(4))
    state.cper(fatal, [(state.SEV_FATAL, [30])], count=1)
    fatal.cper_time0 = now - 60
    state.cper(corrected, [(state.SEV_NON_FATAL_CORRECTED, [12])], count=1)
    corrected.cper_time0 = now - 60
    # Fatal, but logged by the GPU 20 minutes ago: out of the 10-minute window by its own time.
    state.cper(old, [(state.SEV_FATAL, [30])], count=1)
    old.cper_time0 = now - 1200
    state.cper(unknown, [(state.SEV_NON_FATAL_UNCORRECTED, [77])], count=1)
    unknown.cper_time0 = now - 60
    d: Daemon = daemon_factory(config=AMD_CONFIG, env=amdsmi_env)
    me = [{"device": str(i), "uuid": expected.uuid(amdsmi_fake.device(i))} for i in range(5)]
    d.wait_metric(
        "accel_amd_afid_errors_total", 1, afid="77", severity="non_fatal_uncorrected", **me[3]
    )
    d.wait_metric("accel_device_health", 1, state="failed", **me[0])
    got = samples(d.metrics())
    want = [
        ("failed", "replace_device", {"afid_30": "replace_device"}),  # AMD's table (inferred)
        ("ok", "none", {"afid_12": "none"}),  # configured harmless
        ("ok", "none", {}),  # aged out
        ("failed", "service", {"afid_77": "service"}),  # no table names it: service, code kept
        ("ok", "none", {}),  # no record at all
    ]
    for i, (verdict, action, why) in enumerate(want):
        assert one_hot(got, "accel_device_health", STATES, **me[i]) == verdict, i
        assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[i]) == action, i
        assert reasons(got, me[i]["uuid"]) == why, i
    # The old record is still counted: the counter is history, the verdict is the window.
    assert value(got, "accel_amd_afid_errors_total", afid="30", severity="fatal", **me[2]) == 1


def test_a_gpu_back_from_lost_is_reset_and_its_reset_xid_cleared(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(2)
    d: Daemon = daemon_factory(nvml_config(), env=fake.env())
    one = {"device": "1", "uuid": fake.uuid(1)}
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
    fake.inject_xid(1, 48)  # double-bit ECC: reset the GPU
    fake.inject_xid(1, 54)  # auxiliary power: a person must look; no reset fixes it
    d.wait_metric("accel_device_recommended_action", 1, action="inspect_hardware", **one)
    fake.device(1).lost = 1
    d.wait_metric("accel_device_down_reason_info", 1, reason="gpu_lost", **one)
    fake.device(1).lost = 0  # back: the driver reset it
    d.wait_metric("accel_device_up", 1, timeout=60, **one)
    d.wait_for(
        lambda: reasons(samples(d.metrics()), one["uuid"]) == {"xid_54": "inspect_hardware"},
        timeout=30,
        what="xid 48 cleared by the reset, xid 54 kept",
    )
    # The counter is history: still 1.
    assert value(d.metrics(), "accel_xid_errors_total", xid="48", **one) == 1
