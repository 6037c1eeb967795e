"""The NVSentinel output against a real gRPC server built from NVSentinel's proto, on a
unix socket: the events it receives, and the output's behaviour while the socket is
absent, the server refuses or hangs, and once it is back."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config.nvsentinel import NvsentinelOutputConfig
from exporter.outputs.nvsentinel import NvsentinelOutput
from exporter.store import Store
from tests.helpers.kube_writer import device_info, publish, verdict
from tests.helpers.nvsentinel_server import (
    HANG,
    OK,
    REFUSE,
    FakePlatformConnector,
    action,
    entities,
    strategy,
)

U0, U1 = "GPU-0000", "GPU-1111"
INFO = (
    device_info("0", U0, "00000000:17:00.0", vendor="nvidia"),
    device_info("1", U1, "00000000:18:00.0", vendor="nvidia"),
)


@pytest.fixture
def sock() -> Iterator[Path]:
    # A short directory: a unix socket's path is limited to 107 bytes.
    where = Path(tempfile.mkdtemp(prefix="nvs", dir="/tmp"))
    yield where / "nvsentinel.sock"
    shutil.rmtree(where, ignore_errors=True)


def output(store: Store, sock: Path, **kw) -> NvsentinelOutput:
    config = NvsentinelOutputConfig(
        enabled=True, socket=str(sock), **{"timeout": 0.5, "backoff_max": 1.0, **kw}
    )
    return NvsentinelOutput(config, store, node="gpu-node-a")


def bad_and_good(store: Store) -> None:
    publish(
        store,
        verdict("0", U0, "failed", "xid_79", action="reboot_node"),
        verdict("1", U1, "ok"),
        readings=INFO,
    )


def test_events_entities_action_and_shadow_then_recovery(sock):
    store = Store()
    out = output(store, sock)
    bad_and_good(store)
    with FakePlatformConnector(sock) as server:
        out.sync()
        fatal, baseline = server.wait_events(2)
        assert (fatal.isFatal, fatal.isHealthy, action(fatal)) == (True, False, "RESTART_BM")
        assert list(fatal.errorCode) == ["xid_79"]
        assert entities(fatal) == {"GPU": ["0"], "PCI": ["0000:17:00.0"], "GPU_UUID": [U0]}
        assert strategy(fatal) == "STORE_ONLY" and strategy(baseline) == "STORE_ONLY"
        assert (fatal.agent, fatal.nodeName, fatal.componentClass) == (
            "accel-exporter",
            "gpu-node-a",
            "GPU",
        )
        assert fatal.checkName == "AcceleratorHealth" and fatal.generatedTimestamp.seconds > 0
        assert (baseline.isHealthy, entities(baseline)["GPU_UUID"]) == (True, [U1])
        out.sync()  # nothing changed: nothing sent
        assert len(server.requests) == 1
        publish(store, verdict("0", U0, "unknown", "xid_79", action="reboot_node"), readings=INFO)
        out.sync()  # unknown: no evidence, no event
        assert len(server.requests) == 1
        publish(store, verdict("0", U0, "ok"), verdict("1", U1, "ok"), readings=INFO)
        out.sync()
        out.sync()
        events = server.events()
        assert len(events) == 3
        healthy = events[2]
        assert (healthy.isHealthy, healthy.isFatal, action(healthy)) == (True, False, "NONE")
        assert entities(healthy) == entities(fatal) and strategy(healthy) == "STORE_ONLY"
    status = out.status()
    assert status["events"] == {"fatal": 1, "non_fatal": 0, "healthy": 2}
    assert status["connected"] is True


def test_shadow_off_asks_for_remediation(sock):
    store = Store()
    out = output(store, sock, shadow=False)
    bad_and_good(store)
    with FakePlatformConnector(sock) as server:
        out.sync()
        assert {strategy(e) for e in server.wait_events(2)} == {"EXECUTE_REMEDIATION"}


def run_output(out: NvsentinelOutput):
    """Start the output's thread in a loop of its own; returns the stopper."""
    loop = asyncio.new_event_loop()
    loop.run_until_complete(out.start())

    def stop() -> None:
        loop.run_until_complete(out.stop(5.0))
        loop.close()

    return stop


def failures(store: Store, reason: str) -> float:
    for reading in store.view().readings("accel_exporter_nvsentinel_failures_total"):
        if reading.labels == (reason,):
            return float(reading.value)
    return 0.0


def wait(check, timeout: float = 20.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_absent_refusing_and_hung_then_back(sock):
    store = Store()
    out = output(store, sock, interval=0.2, backoff_min=0.2)
    bad_and_good(store)
    stop = run_output(out)
    try:
        wait(lambda: failures(store, "socket_missing") >= 2, what="socket_missing counted")
        assert out.status()["connected"] is False
        with FakePlatformConnector(sock, mode=REFUSE) as server:
            wait(lambda: failures(store, "rejected") >= 2, what="rejected counted")
            assert server.events() == []
            server.set_mode(HANG)
            wait(lambda: failures(store, "timeout") >= 1, what="a timed-out call")
            # While a call hangs the store answers at once: nothing waits on the output.
            began = time.monotonic()
            for _ in range(20):
                store.view()
                out.status()
            assert time.monotonic() - began < out.config.timeout
            server.set_mode(OK)
            got = server.wait_events(2, timeout=20)
            assert [e.isFatal for e in got[:2]] == [True, False]
            wait(lambda: out.status()["connected"] is True, what="connected again")
        assert out.status()["failures"]["timeout"] >= 1
    finally:
        stop()
    assert not (out._thread and out._thread.is_alive())


def test_a_reload_keeps_what_was_sent(sock):
    store = Store()
    first = output(store, sock)
    bad_and_good(store)
    with FakePlatformConnector(sock) as server:
        first.sync()
        server.wait_events(2)
        second = output(store, sock, interval=10.0)
        assert second.fingerprint() != first.fingerprint()
        second.adopt(first)
        second.sync()  # the same verdicts: nothing new to tell
        assert len(server.requests) == 1
        assert second.status()["events"]["fatal"] == 1
