"""outputs.nvsentinel in the real daemon, a real gRPC server built from NVSentinel's proto
on the other side: an XID from the fake NVML becomes a fatal HealthEvent, the GPU's
recovery one healthy event; the socket absent, the server refusing or hung cost the
daemon nothing (/metrics answers within a fraction of the output's deadline)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_nvml_daemon import OTHERS_OFF
from tests.helpers.daemon import Daemon, value
from tests.helpers.nvsentinel_server import (
    HANG,
    OK,
    REFUSE,
    FakePlatformConnector,
    action,
    entities,
    strategy,
)

NODE = "gpu-node-a"
DEADLINE = 2.0  # the output's deadline per call, in seconds


@pytest.fixture
def sock() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="nvs", dir="/tmp"))
    yield where / "nvsentinel.sock"
    shutil.rmtree(where, ignore_errors=True)


def config(sock: Path, **nvsentinel: Any) -> dict[str, Any]:
    return {
        "sources": {**OTHERS_OFF, "nvml": {"interval": "1s", "slow_interval": "1s"}},
        # XIDs count for 6 s: a GPU failed by one is ok again soon after.
        "health": {"event_window": "6s"},
        "outputs": {
            "nvsentinel": {
                "enabled": True,
                "socket": str(sock),
                "node_name": NODE,
                "interval": "500ms",
                "timeout": f"{DEADLINE}s",
                "backoff_min": "200ms",
                "backoff_max": "1s",
                **nvsentinel,
            }
        },
    }


def of(events: list[Any], uuid: str) -> list[Any]:
    return [e for e in events if uuid in entities(e).get("GPU_UUID", [])]


def test_a_failed_gpu_is_fatal_and_its_recovery_one_healthy_event(daemon_factory, fake_nvml, sock):
    fake = fake_nvml(2)
    u1 = fake.uuid(1)
    with FakePlatformConnector(sock) as server:
        d: Daemon = daemon_factory(config(sock), env=fake.env())
        d.wait_for(lambda: len(of(server.events(), u1)) >= 1, timeout=30, what="baseline")
        assert of(server.events(), u1)[0].isHealthy
        d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
        fake.inject_xid(1, 79)
        d.wait_for(lambda: len(of(server.events(), u1)) >= 2, timeout=30, what="fatal event")
        fatal = of(server.events(), u1)[1]
        assert (fatal.isFatal, fatal.isHealthy, action(fatal)) == (True, False, "RESTART_BM")
        assert list(fatal.errorCode) == ["xid_79"] and strategy(fatal) == "STORE_ONLY"
        ents = entities(fatal)
        assert ents["GPU"] == ["1"] and ents["GPU_UUID"] == [u1] and len(ents["PCI"]) == 1
        assert (fatal.agent, fatal.nodeName, fatal.componentClass) == (
            "accel-exporter",
            NODE,
            "GPU",
        )
        d.wait_for(lambda: len(of(server.events(), u1)) >= 3, timeout=30, what="healthy event")
        time.sleep(2.0)  # several passes more: still one healthy event
        mine = of(server.events(), u1)
        assert [(e.isFatal, e.isHealthy) for e in mine] == [
            (False, True),
            (True, False),
            (False, True),
        ]
        assert entities(mine[2]) == ents and action(mine[2]) == "NONE"
        assert value(d.metrics(), "accel_exporter_nvsentinel_events_total", kind="fatal") == 1
        assert d.status()["outputs"]["nvsentinel"]["connected"] is True


def test_shadow_off_asks_nvsentinel_to_remediate(daemon_factory, fake_nvml, sock):
    fake = fake_nvml(1)
    with FakePlatformConnector(sock) as server:
        daemon_factory(config(sock, shadow=False), env=fake.env())
        (event,) = server.wait_events(1)
        assert strategy(event) == "EXECUTE_REMEDIATION"


def prompt_scrapes(d: Daemon, uuid: str, times: int = 3) -> None:
    """/metrics answers, each within half the output's deadline (a hung call takes all of it)."""
    for _ in range(times):
        began = time.monotonic()
        assert value(d.metrics(), "accel_device_up", device="0", uuid=uuid) == 1
        assert time.monotonic() - began < DEADLINE / 2


def failures(d: Daemon, reason: str) -> float:
    return value(d.metrics(), "accel_exporter_nvsentinel_failures_total", reason=reason) or 0


def test_absent_refusing_and_hung_cost_the_daemon_nothing(daemon_factory, fake_nvml, sock):
    fake = fake_nvml(1)
    d: Daemon = daemon_factory(config(sock), env=fake.env())
    u0 = fake.uuid(0)
    d.wait_for(lambda: failures(d, "socket_missing") >= 2, timeout=30, what="socket_missing")
    prompt_scrapes(d, u0)
    with FakePlatformConnector(sock, mode=REFUSE) as server:
        d.wait_for(lambda: failures(d, "rejected") >= 1, timeout=30, what="rejected")
        prompt_scrapes(d, u0)
        server.set_mode(HANG)
        d.wait_for(lambda: server.hanging >= 1, timeout=30, what="a hung call")
        prompt_scrapes(d, u0)  # while the output waits out its deadline
        assert d.get("/v1/devices").status == 200
        d.wait_for(lambda: failures(d, "timeout") >= 1, timeout=30, what="timeout")
        server.set_mode(OK)
        server.wait_events(1, timeout=30)
        d.wait_for(
            lambda: value(d.metrics(), "accel_exporter_nvsentinel_connected") == 1,
            timeout=30,
            what="connected",
        )
