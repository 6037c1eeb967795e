"""NVLink error rates through the real daemon and the fake NVML: degraded or predicted, never failed.

The daemon reads the fake's NVLink error counters each slow poll; the test makes them
grow. The rules file (health.trend_rules) is the shipped rules' shape with one-second
windows, so that three windows take seconds, not minutes.
"""

from __future__ import annotations

import threading
import time

import yaml

from tests.e2e.test_nvml_daemon import nvml_config
from tests.fakes.nvml.control import NVLINK_CRC_FLIT, NVLINK_RECOVERY, NVLINK_REPLAY
from tests.helpers.daemon import samples, value

ADVICE = {"action": "none", "escalation": "service", "reference": "test rules"}
WINDOWS = {"length_s": 1, "raise": 3, "clear": 3}
RULES = {
    "rules": [
        {
            "reason": "nvlink_error_rate",
            "signal": "nvlink_replay",
            "family": "accel_nvlink_errors_total",
            "match": {"type": ["replay"]},
            "threshold": {"count": 1, "per_s": 1},
            "windows": WINDOWS,
            "state": "degraded",
            "advice": ADVICE,
        },
        {
            "reason": "nvlink_error_rate",
            "signal": "nvlink_replay",
            "family": "accel_nvlink_errors_total",
            "match": {"type": ["recovery"]},
            "threshold": {"count": 1, "per_s": 1},
            "windows": WINDOWS,
            "state": "predicted_failure",
            "advice": ADVICE,
        },
        {
            "reason": "nvlink_crc_rate",
            "signal": "nvlink_crc",  # the shipped registry takes this verdict away
            "family": "accel_nvlink_errors_total",
            "match": {"type": ["crc_flit"]},
            "threshold": {"count": 10, "per_s": 1},
            "windows": WINDOWS,
            "state": "predicted_failure",
            "advice": ADVICE,
        },
    ]
}


def test_nvlink_error_rates_degrade_or_predict_never_fail_and_crc_is_downgraded(
    daemon_factory, fake_nvml, tmp_path
):
    rules = tmp_path / "trend_rules.yaml"
    rules.write_text(yaml.safe_dump(RULES))
    config = nvml_config()
    config["health"] = {"trend_rules": str(rules)}
    # The verdict families are in the minimal profile: a small exposition to parse twice a
    # second on a loaded machine.
    config["outputs"]["prometheus"]["profile"] = "minimal"
    fake = fake_nvml(4)
    d = daemon_factory(config, env=fake.env())
    u = [fake.uuid(i) for i in range(4)]
    d.wait_metric("accel_device_up", 1, device="3", uuid=u[3])

    def state(s, i: int) -> str | None:
        for name in ("ok", "degraded", "predicted_failure", "failed"):
            if value(s, "accel_device_health", device=str(i), uuid=u[i], state=name) == 1:
                return name
        return None

    # GPU 0: 200 replays a second; GPU 1: 2000 CRC errors a second; GPU 2: 200
    # recoveries a second; GPU 3: nothing. Grown by a thread of their own, ten times a
    # second (a scrape of the test may take longer than a window on a loaded machine),
    # until GPUs 0 and 2 are judged on it.
    stop = threading.Event()

    def grow() -> None:
        while not stop.wait(0.1):
            fake.device(0).nvlink_errors[0][NVLINK_REPLAY] += 20
            fake.device(1).nvlink_errors[0][NVLINK_CRC_FLIT] += 200
            fake.device(2).nvlink_errors[1][NVLINK_RECOVERY] += 20

    grower = threading.Thread(target=grow, daemon=True)
    grower.start()
    seen: dict[int, set[str | None]] = {i: set() for i in range(4)}
    deadline = time.monotonic() + 120
    got = None
    try:
        while time.monotonic() < deadline:
            s = samples(d.metrics())
            for i in range(4):
                seen[i].add(state(s, i))
            downgraded = value(
                s,
                "accel_health_signal_downgraded_total",
                device="1",
                uuid=u[1],
                signal="nvlink_crc",
                reason="dcgm_4_7_nvlink_ber",
            )
            if state(s, 0) == "degraded" and state(s, 2) == "predicted_failure" and downgraded:
                got = s
                break
            time.sleep(0.5)
    finally:
        stop.set()
        grower.join()
    assert got is not None, f"states seen: {seen}"
    reasons = {
        (dict(labels)["device"], dict(labels)["reason"])
        for (name, labels), v in got.items()
        if name == "accel_device_health_reason_info" and v == 1
    }
    assert reasons == {("0", "nvlink_error_rate"), ("2", "nvlink_error_rate")}
    # The CRC storm on GPU 1 is counted, not judged: it stays ok.
    assert state(got, 1) == "ok" and state(got, 3) == "ok"
    assert "failed" not in set().union(*seen.values())
    action = value(
        got,
        "accel_device_action_reason_info",
        device="0",
        uuid=u[0],
        reason="nvlink_error_rate",
        action="none",
        scope="device",
        escalation="service",
        escalation_scope="",
        provenance="exporter_rule",
    )
    assert action == 1

    # The errors stop: three quiet windows clear the trend.
    def cleared():
        s = samples(d.metrics())
        return state(s, 0) == "ok" and state(s, 2) == "ok"

    d.wait_for(cleared, timeout=60, what="GPUs 0 and 2 ok again after quiet windows")
