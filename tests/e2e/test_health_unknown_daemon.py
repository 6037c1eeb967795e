"""The exporter's own trouble is no evidence about a GPU: the real daemon (subprocess)
against the fake NVML, its worker SIGKILLed or unable to start. Meanwhile every GPU is
Unknown on /v1/devices (with why, and what is remembered of it) and none is failed on
/metrics; a GPU the worker reports lost is still failed, for device_down."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import jsonschema

from tests.e2e.test_health_api import SCHEMA
from tests.e2e.test_nvml_daemon import OTHERS_OFF
from tests.helpers.daemon import Daemon, samples, value

STATES = ("ok", "degraded", "failed", "predicted_failure")
NVML_UNKNOWN = 999  # NVML_ERROR_UNKNOWN


def config() -> dict[str, Any]:
    return {
        "sources": {
            **OTHERS_OFF,
            "nvml": {"interval": "500ms", "slow_interval": "1s", "timeout": "5s"},
        },
    }


def devices(d: Daemon) -> dict[str, dict[str, Any]]:
    """/v1/devices (checked against the published schema), by uuid."""
    resp = d.get("/v1/devices")
    assert resp.status == 200, resp.body
    doc = json.loads(resp.body)
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    return {dev["uuid"]: dev for dev in doc["devices"]}


def held(got: Any, uuid: str, device: str) -> list[str]:
    """The states at 1 of one GPU's accel_device_health (none: unknown)."""
    return [
        s
        for s in STATES
        if value(got, "accel_device_health", state=s, device=device, uuid=uuid) == 1
    ]


class Watch:
    """Samples /v1/devices and /metrics together, poll after poll, until a condition."""

    def __init__(self, d: Daemon, uuids: list[str]) -> None:
        self.d, self.uuids = d, uuids
        self.docs: list[dict[str, dict[str, Any]]] = []
        self.metrics: list[Any] = []

    def until(self, done: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while True:
            self.docs.append(devices(self.d))
            self.metrics.append(samples(self.d.metrics()))
            if done(self.docs[-1]):
                return
            assert time.monotonic() < end, f"{what}; last: {self.docs[-1]}"
            time.sleep(0.05)

    def health(self, uuid: str) -> list[str]:
        return [doc[uuid]["health"] for doc in self.docs]

    def failed_at_any_time(self, i: int) -> bool:
        return any(held(got, self.uuids[i], str(i)) == ["failed"] for got in self.metrics)


def healthy(uuids: list[str], unhealthy: frozenset[str] = frozenset()) -> Any:
    def check(doc: dict[str, dict[str, Any]]) -> bool:
        return all(
            doc[u]["health"] == ("Unhealthy" if u in unhealthy else "Healthy") for u in uuids
        )

    return check


def worker_pid(d: Daemon) -> int:
    pid = d.status()["sources"]["nvml"]["worker_pid"]
    assert isinstance(pid, int) and pid in d.workers()
    return pid


def test_a_killed_worker_makes_every_gpu_unknown_until_data_is_back(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(3)
    d: Daemon = daemon_factory(config(), env=fake.env())
    u = [fake.uuid(i) for i in range(3)]
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
    fake.inject_xid(1, 79)  # GPU 1 asks for a reboot: failed, and remembered
    d.wait_for(lambda: healthy(u, frozenset({u[1]}))(devices(d)), what="GPU 1 failed")
    # The next worker takes 3 s to enumerate: the restart is long enough to be seen.
    fake.add_rule("nvmlDeviceGetCount_v2", delay_ms=3000, times=1)
    os.kill(worker_pid(d), signal.SIGKILL)
    w = Watch(d, u)
    w.until(lambda doc: all(doc[x]["health"] == "Unknown" for x in u), 20, "Unknown")
    w.until(healthy(u, frozenset({u[1]})), 30, "data back")
    gone = [doc for doc in w.docs if all(doc[x]["health"] == "Unknown" for x in u)]
    assert gone, w.docs
    for doc in gone:
        for x in u:
            # Unknown for the exporter's own trouble, said as such: no verdict.
            assert doc[x]["verdict"] is None, doc[x]
            assert doc[x]["message"].startswith("source nvml worker "), doc[x]
        # What is remembered of GPU 1 is still listed and still asks for a reboot.
        assert doc[u[1]]["recommended_action"] == "reboot_node", doc[u[1]]
        assert [r["reason"] for r in doc[u[1]]["reasons"]] == ["xid_79"]
        assert doc[u[0]]["recommended_action"] == "none" and doc[u[0]]["reasons"] == []
    whys = {doc[u[0]]["message"] for doc in gone}
    assert whys <= {
        "source nvml worker restarting: crashed",
        "source nvml worker starting",
    }, whys
    # Unknown until the data is back, then Healthy: never Unhealthy on the way.
    for x in (u[0], u[2]):
        states = w.health(x)
        assert "Unhealthy" not in states, states
        first = states.index("Unknown")
        assert set(states[first : states.index("Healthy", first)]) == {"Unknown"}, states
    # On /metrics, no GPU 0 or 2 was ever failed; while unknown no state held at all.
    assert not w.failed_at_any_time(0) and not w.failed_at_any_time(2)
    unknown = [got for got in w.metrics if held(got, u[0], "0") == []]
    assert unknown, "no scrape in the unknown window"
    for got in unknown:
        assert value(got, "accel_device_up", device="0", uuid=u[0]) == 0
        assert (
            value(
                got, "accel_device_health_reason_info", reason="device_down", device="0", uuid=u[0]
            )
            is None
        )
    # A GPU the worker itself reports lost is still failed, for device_down.
    fake.device(2).lost = 1
    d.wait_for(lambda: devices(d)[u[2]]["health"] == "Unhealthy", what="GPU 2 lost")
    lost = devices(d)[u[2]]
    assert lost["verdict"] == "failed" and lost["source_state"] == "ok"
    assert "device_down" in [r["reason"] for r in lost["reasons"]]
    got = samples(d.metrics())
    assert held(got, u[2], "2") == ["failed"]
    assert (
        value(got, "accel_device_health_reason_info", reason="device_down", device="2", uuid=u[2])
        == 1
    )
    assert (
        value(got, "accel_device_down_reason_info", reason="gpu_lost", device="2", uuid=u[2]) == 1
    )


def test_a_worker_that_cannot_start_leaves_the_gpus_unknown_not_unhealthy(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(2)
    d: Daemon = daemon_factory(config(), env=fake.env())
    u = [fake.uuid(i) for i in range(2)]
    d.wait_for(lambda: healthy(u)(devices(d)), what="healthy")
    # Every new worker now fails its bootstrap (enumeration errors); the running one
    # never enumerates again, so it is killed to make the daemon start another.
    rule = fake.add_rule("nvmlDeviceGetCount_v2", error=NVML_UNKNOWN)
    os.kill(worker_pid(d), signal.SIGKILL)
    w = Watch(d, u)

    def bootstrap_failed(doc: dict[str, dict[str, Any]]) -> bool:
        return all(doc[x]["message"] == "source nvml worker restarting: unknown" for x in u)

    w.until(bootstrap_failed, 30, "the bootstrap failing")
    time.sleep(2)  # a few more restarts, each failing
    w.until(bootstrap_failed, 5, "still failing")
    for x in u:
        assert "Unhealthy" not in w.health(x), w.health(x)
        assert w.docs[-1][x]["verdict"] is None and w.docs[-1][x]["source_state"] == "failing"
    assert not w.failed_at_any_time(0) and not w.failed_at_any_time(1)
    got = w.metrics[-1]
    assert held(got, u[0], "0") == [] and held(got, u[1], "1") == []
    assert value(got, "accel_device_down_reason_info", reason="unknown", device="0", uuid=u[0]) == 1
    fake.clear_rule(rule)
    w.until(healthy(u), 30, "a worker starts again")
