"""GET /v1/devices on the real daemon: the published schema, the tri-state, staleness,
and the listener's auth (with the probes' exemption when configured)."""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import bcrypt
import jsonschema

from tests.helpers.daemon import REPO, Daemon, samples

SCHEMA = json.loads(Path(REPO / "docs/health-api.schema.json").read_text())
INTERVAL, STALE = 1.0, 3.0


def config(**web: Any) -> dict[str, Any]:
    return {
        "web": web,
        "sources": {
            "host": {"enabled": False},
            "amdsmi": {"enabled": False},
            "nvml": {
                "interval": f"{INTERVAL}s",
                "slow_interval": "1s",
                "timeout": "30s",  # a stopped worker goes stale long before its poll times out
                "stale_after": f"{STALE}s",
            },
        },
    }


def devices(d: Daemon, **kw: Any) -> dict[str, Any]:
    resp = d.get("/v1/devices", **kw)
    assert resp.status == 200, resp.body
    assert resp.headers["Content-Type"] == "application/json"
    doc: dict[str, Any] = json.loads(resp.body)
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    return doc


def by_index(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {dev["index"]: dev for dev in doc["devices"] if dev["source"] == "nvml"}


def finding_of(d: Daemon, uuid: str, reason: str) -> dict[str, str]:
    """The labels of the ``accel_device_action_reason_info`` series of one finding."""
    for (metric, labels), _value in samples(d.metrics()).items():
        named = dict(labels)
        wanted = (metric, named.get("uuid"), named.get("reason"))
        if wanted == ("accel_device_action_reason_info", uuid, reason):
            return named
    raise AssertionError(f"no {reason} finding for {uuid} on /metrics")


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_devices_validate_and_a_stale_source_turns_them_unknown(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(3)
    d: Daemon = daemon_factory(config(), env=fake.env())
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
    d.wait_for(lambda: by_index(devices(d))[2]["health"] == "Healthy", what="healthy")
    fake.inject_xid(1, 79)
    fake.inject_xid(2, 31)
    d.wait_for(lambda: by_index(devices(d))[1]["health"] == "Unhealthy", what="xid 79")
    d.wait_for(lambda: by_index(devices(d))[2]["recommended_action"] == "restart_app", what="31")
    got = by_index(devices(d))
    assert [got[i]["uuid"] for i in range(3)] == [fake.uuid(i) for i in range(3)]
    assert all(got[i]["vendor"] == "nvidia" and got[i]["pci_address"] for i in range(3))
    bus = [fake.device(i).pci_bus for i in range(3)]
    assert [int(got[i]["pci_address"].split(":")[1], 16) for i in range(3)] == bus
    one = got[1]
    assert (one["verdict"], one["recommended_action"]) == ("failed", "reboot_node")
    (xid,) = one["reasons"]
    advice = finding_of(d, fake.uuid(1), "xid_79")
    assert xid == {
        "reason": "xid_79",
        "state": "failed",
        "action": "reboot_node",
        "code": "79",
        "immediate": "RESTART_BM",
        "investigatory": "CONTACT_SUPPORT",
        "severity": "",
        "event_time": xid["event_time"],
        # The Xid catalog's row as /metrics says it: how far, what next, whence.
        "scope": advice["scope"],
        "escalation": advice["escalation"],
        "escalation_scope": advice["escalation_scope"],
        "detail": xid["detail"],
        "provenance": advice["provenance"],
        "reference": xid["reference"],
    }
    assert one["action_scope"] == advice["scope"]
    assert one["escalation"] == advice["escalation"]
    # Its devices: the GPU itself, else every GPU of the node (no clique, no board named).
    reach = [dev["uuid"] for dev in one["action_scope_devices"]]
    alone = advice["scope"] == "device"
    assert reach == ([fake.uuid(1)] if alone else sorted(fake.uuid(i) for i in range(3)))
    assert all(
        dev["device"] == str([fake.uuid(i) for i in range(3)].index(dev["uuid"]))
        for dev in one["action_scope_devices"]
    )
    assert when(one["since"]) >= when(xid["event_time"]) - 1
    # An application fault: the GPU stays Healthy, the job has to restart.
    assert (got[2]["health"], got[2]["verdict"]) == ("Healthy", "ok")
    assert got[0]["health"] == "Healthy" and got[0]["reasons"] == []

    # The worker stops answering: its devices turn Unknown once the data is older
    # than stale_after, and not before (both read on the daemon's own clock).
    pid = d.status()["sources"]["nvml"]["worker_pid"]
    last_good = max(when(dev["last_updated"]) for dev in by_index(devices(d)).values())
    os.kill(pid, signal.SIGSTOP)
    try:
        answers = []

        def unknown() -> bool:
            doc = devices(d)
            answers.append(doc)
            return all(dev["health"] == "Unknown" for dev in by_index(doc).values())

        d.wait_for(unknown, timeout=30, interval=0.2, what="Unknown after the deadline")
        last_updated = max(when(dev["last_updated"]) for dev in by_index(answers[-1]).values())
        assert last_updated >= last_good
        deadline = last_updated + STALE
        for doc in answers:
            states = {dev["health"] for dev in by_index(doc).values()}
            at = when(doc["generated_at"])
            if states == {"Unknown"}:
                assert at >= deadline - 0.05, "Unknown before the data was stale"
            else:  # still answered Healthy/Unhealthy: only within one interval past the deadline
                assert at <= deadline + INTERVAL, "known state served past the deadline"
        stale = by_index(answers[-1])[1]
        assert stale["source_state"] == "stale" and stale["verdict"] == "failed"
        assert stale["message"].startswith("source nvml is stale")
    finally:
        os.kill(pid, signal.SIGCONT)
    d.wait_for(lambda: by_index(devices(d))[0]["health"] == "Healthy", timeout=30, what="back")


def test_devices_need_auth_unless_exempted_like_the_probes(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(1)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    auth = {"basic_auth": {"users": {"prom": hashed}}}
    d: Daemon = daemon_factory(config(**auth), env=fake.env())
    assert d.get("/v1/devices").status == 401
    d.wait_for(lambda: devices(d, auth=("prom", "s3cret"))["devices"], what="devices")
    d.stop()
    d = daemon_factory(config(**auth, health_api_unauthenticated=True), env=fake.env())
    d.wait_for(lambda: devices(d)["devices"], what="devices without credentials")
    assert d.get("/metrics").status == 401  # the exemption is this path's only
    assert d.get("/status").status == 401
