"""Lifecycle edge cases: signals during start-up and reload, failure data during backoff,
a library that disappears after working, slow bootstraps, credential rotation."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import bcrypt
import pytest

from tests.helpers.daemon import Daemon, value
from tests.helpers.test_sources import control_writer


@pytest.fixture
def ctl(tmp_path):
    return control_writer(tmp_path / "control.json", value=3)


def worker_env(ctl, **extra: str) -> dict[str, str]:
    return {
        "ACCEL_TEST_CONTROL": ctl.path,
        "ACCEL_TEST_INTERVAL": "0.5",
        "ACCEL_TEST_TIMEOUT": "1.0",
        **extra,
    }


def test_device_down_stays_visible_through_backoff(daemon_factory, ctl):
    d = daemon_factory(extra_sources="tests.helpers.test_sources:build_worker", env=worker_env(ctl))
    d.wait_metric("accel_device_up", 1, device="0", uuid="TEST-0")
    ctl("crash")
    d.wait_metric("accel_device_up", 0, device="0", uuid="TEST-0")
    # A smoke test of the stale extension (tests/unit/test_scheduler.py checks the rule):
    # through the first backoff gaps the down state never vanishes.
    seen = []

    def backed_off() -> bool:
        seen.append(value(d.metrics(), "accel_device_up", device="0", uuid="TEST-0"))
        return d.status()["sources"]["testdev"]["consecutive_failures"] >= 3

    d.wait_for(backed_off, interval=0.1, what="three failed polls")
    assert seen and all(v == 0 for v in seen), seen


def test_auto_source_whose_library_vanishes_is_down_not_unavailable(daemon_factory, ctl):
    d = daemon_factory(
        extra_sources="tests.helpers.test_sources:build_worker",
        env=worker_env(ctl, ACCEL_TEST_AUTO="1"),
    )
    d.wait_metric("accel_device_up", 1, device="1", uuid="TEST-1")
    ctl("crash")  # the driver goes away: the worker dies...
    d.wait_for(lambda: d.status()["sources"]["testdev"]["state"] != "ok", what="worker died")
    ctl("bootstrap_unavailable")  # ...and every new worker says: no library here
    # A reload keeps what was learned: this node had the library.
    d.signal(signal.SIGHUP)
    d.wait_metric("accel_exporter_source_up", 0, source="testdev")
    text = d.metrics()
    assert (
        value(
            text,
            "accel_exporter_source_unavailable_info",
            source="testdev",
            reason="library_not_found",
        )
        is None
    )
    assert value(text, "accel_device_up", device="1", uuid="TEST-1") == 0


def test_slow_bootstrap_is_pending_not_failing(daemon_factory, ctl):
    ctl("bootstrap_hang")
    d = daemon_factory(extra_sources="tests.helpers.test_sources:build_worker", env=worker_env(ctl))
    time.sleep(2.5)  # several poll intervals while the worker is still bootstrapping
    assert d.get("/readyz").status == 503
    text = d.metrics()
    assert value(text, "accel_exporter_source_up", source="testdev") is None
    assert 'accel_exporter_source_errors_total{reason="starting"' not in text
    ctl("ok", value=9)
    d.wait_metric("accel_power_watts", 9, device="0", uuid="TEST-0")
    assert d.get("/readyz").status == 200
    assert 'source="testdev"' not in "".join(
        line
        for line in d.metrics().splitlines()
        if line.startswith("accel_exporter_source_errors_total")
    )


def sighup_ignored(pid: int) -> bool:
    """Whether the process ignores SIGHUP now (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def test_sighup_during_startup_does_not_start_twice(tmp_path, ctl):
    starts = tmp_path / "starts"
    d = Daemon(
        tmp_path,
        {"sources": {"host": {"interval": "1s"}}},
        extra_sources="tests.helpers.test_sources:build",
        env={
            "ACCEL_TEST_CONTROL": ctl.path,
            "ACCEL_TEST_START_DELAY": "2",
            "ACCEL_TEST_INTERVAL": "5",
            "ACCEL_TEST_STARTS": str(starts),
        },
    )
    try:
        import threading

        def hup_soon() -> None:
            # Once the CLI has set SIGHUP aside (its first act after parsing the flags),
            # while the sources still start (2 s). A fixed delay raced the interpreter's
            # imports on a loaded machine: the SIGHUP came first and its default killed it.
            while d.proc is None or not sighup_ignored(d.proc.pid):
                time.sleep(0.01)
            # Still starting: the controlled source has not finished its start (2 s).
            during.append(not starts.exists())
            d.signal(signal.SIGHUP)
            sent.set()

        sent = threading.Event()
        during: list[bool] = []
        threading.Thread(target=hup_soon, daemon=True).start()
        d.start(wait=60)
        assert sent.wait(30), "the SIGHUP was not sent"
        assert during == [True], "the SIGHUP came after the sources had started"
        assert d.proc.poll() is None, "a SIGHUP during start-up must not kill the daemon"
        # A negative window: a second start-up would start the sources again (and poll
        # host twice as often). The starts are counted, not timed; the poll rate is a
        # ratio against the window measured around both reads, wide enough for a loaded
        # machine and still below the two polls a second of two runtimes.
        t0 = time.monotonic()
        before = d.status()["sources"]["host"]["polls"]
        time.sleep(4.0)
        polls = d.status()["sources"]["host"]["polls"] - before
        window = time.monotonic() - t0
        assert starts.read_text().splitlines() == [str(d.proc.pid)], starts.read_text()
        assert polls <= 1.5 * window + 1, (polls, window)
    finally:
        d.__exit__()


def test_sighup_then_sigterm_leaves_nothing_behind(daemon_factory, ctl):
    d = daemon_factory(extra_sources="tests.helpers.test_sources:build_worker", env=worker_env(ctl))
    d.wait_metric("accel_device_up", 1, device="0", uuid="TEST-0")
    old = d.workers()  # also records them for leftover_children()
    assert old
    d.signal(signal.SIGHUP)
    # The config did not change: the reload leaves the source and its worker running.
    d.wait_for(
        lambda: any(e.get("event") == "config reloaded" for e in d.events), what="the reload"
    )
    assert d.workers() == old
    d.signal(signal.SIGTERM)
    try:
        code = d.proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pytest.fail("daemon did not exit within 5 s of SIGTERM after a SIGHUP")
    assert code == 0
    time.sleep(0.2)  # a negative window: nothing the daemon started may outlive it
    assert d.leftover_children() == set()


def test_basic_auth_password_rotation_by_sighup(daemon_factory):
    old = bcrypt.hashpw(b"one", bcrypt.gensalt(rounds=4)).decode()
    new = bcrypt.hashpw(b"two", bcrypt.gensalt(rounds=4)).decode()
    d = daemon_factory({"web": {"basic_auth": {"users": {"prom": old}}}})
    assert d.get("/metrics", auth=("prom", "one")).status == 200
    assert d.get("/metrics", auth=("prom", "two")).status == 401
    d.config_file.write_text(json.dumps({"web": {"basic_auth": {"users": {"prom": new}}}}))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: any(e.get("event") == "config reloaded" for e in d.events), what="reload")
    assert d.get("/metrics", auth=("prom", "two")).status == 200
    assert d.get("/metrics", auth=("prom", "one")).status == 401
    assert not any(e.get("event") == "reload rejected" for e in d.events)
