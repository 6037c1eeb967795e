"""The worker runner against a backend that hangs, crashes, exits or answers garbage."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from exporter import backoff
from exporter.config.devices import DeviceSourceConfig
from exporter.errors import SourceError, SourcePending, SourceUnavailable, WorkerError
from exporter.sources.device import DeviceSource
from exporter.workers import runner as runner_mod
from exporter.workers.runner import WorkerRunner
from tests.helpers.daemon import REPO, children_of
from tests.helpers.test_sources import control_writer
from tests.helpers.wait import eventually_async as eventually

BACKEND = "tests.helpers.worker_backend:MisbehavingBackend"


@pytest.fixture(autouse=True)
def fast_restarts(monkeypatch):
    # Our own runner's backoff constants, not a binding: keeps respawn tests short.
    monkeypatch.setattr(backoff, "RESTART_BASE_SECONDS", 0.2)


@pytest.fixture
def ctl(tmp_path):
    return control_writer(tmp_path / "control.json")


def make_runner(ctl, bootstrap_timeout: float = 10.0) -> WorkerRunner:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return WorkerRunner(
        "t",
        BACKEND,
        {"control": ctl.path, "devices": 2},
        bootstrap_timeout=bootstrap_timeout,
        env=env,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


async def wait_ready(runner: WorkerRunner, timeout: float = 15.0) -> dict:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            return await runner.ready(timeout=0.5)
        except (WorkerError, SourcePending):  # a start slower than 0.5 s on a loaded machine
            if loop.time() > end:
                raise
            await asyncio.sleep(0.1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_bootstrap_and_call(ctl):
    async def go():
        r = make_runner(ctl)
        await r.start()
        try:
            inv = await wait_ready(r)
            assert [d["uuid"] for d in inv["devices"]] == ["TEST-0", "TEST-1"]
            result = await r.call("poll", {}, timeout=5)
            assert result["readings"] == {"accel_power_watts": [0, 42.0, 1, 43.0]}
            assert r.pid in children_of(os.getpid())
        finally:
            await r.stop()
        assert r.pid is None
        assert not any(alive(p) for p in children_of(os.getpid()))

    run(go())


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("hang", "timeout"),
        ("crash", "crashed"),
        ("exit", "crashed"),
        ("garbage", "protocol_error"),
        ("wrong_id", "protocol_error"),
    ],
)
def test_bad_worker_is_killed_reaped_and_respawned(ctl, mode, reason):
    async def go():
        r = make_runner(ctl)
        await r.start()
        try:
            await wait_ready(r)
            first = r.pid
            assert first is not None
            ctl(mode)
            with pytest.raises(WorkerError) as info:
                await r.call("poll", {}, timeout=1.0)
            assert info.value.reason == reason
            # Killed and reaped: the pid is gone, not a zombie.
            assert not alive(first)
            assert first not in children_of(os.getpid())
            ctl("ok")
            await wait_ready(r)
            assert r.pid not in (None, first)
            assert r.state.restarts == 1
            result = await r.call("poll", {}, timeout=5)
            assert result["devices"][0]["up"] is True
            # One worker at a time: the count never grows.
            assert len([p for p in children_of(os.getpid()) if alive(p)]) == 1
        finally:
            ctl("ok")
            await r.stop()
        assert not any(alive(p) for p in children_of(os.getpid()))

    run(go())


@pytest.mark.parametrize(
    ("mode", "reason"), [("fault", "device_busy"), ("unencodable", "bad_reply")]
)
def test_fault_keeps_the_worker(ctl, mode, reason):
    async def go():
        r = make_runner(ctl)
        await r.start()
        try:
            await wait_ready(r)
            pid = r.pid
            ctl(mode)
            with pytest.raises(WorkerError) as info:
                await r.call("poll", {}, timeout=5)
            assert info.value.reason == reason
            assert r.pid == pid and r.state.restarts == 0
            ctl("ok")
            assert (await r.call("poll", {}, timeout=5))["devices"][0]["up"] is True
        finally:
            await r.stop()

    run(go())


def test_bootstrap_error_fails_fast_and_retries(ctl):
    async def go():
        ctl("bootstrap_error")
        r = make_runner(ctl)
        await r.start()
        try:
            await r.settled(10)
            with pytest.raises(WorkerError) as info:
                await r.ready(timeout=0.1)
            assert info.value.reason == "init_failed"
            assert r.state.state == "backoff"
            ctl("ok")
            await wait_ready(r)
            assert r.state.restarts == 1  # a failed bootstrap ends a worker: the next is a restart
        finally:
            await r.stop()

    run(go())


def test_bootstrap_unavailable(ctl):
    async def go():
        ctl("bootstrap_unavailable")
        r = make_runner(ctl)
        await r.start()
        try:
            await r.settled(10)
            with pytest.raises(SourceUnavailable) as info:
                await r.ready(timeout=0.1)
            assert "libfake" in info.value.detail
            assert r.pid is None
            # The re-probe clock is the runner's own; it says when it will look again.
            first = info.value.retry_in
            assert first is not None and 0 < first <= runner_mod.UNAVAILABLE_REPROBE_SECONDS
            # Asked again before the re-probe time, it answers from the last probe.
            with pytest.raises(SourceUnavailable) as again:
                await r.ready(timeout=0.1)
            assert again.value.retry_in is not None and again.value.retry_in <= first
        finally:
            await r.stop()

    run(go())


def test_an_unavailable_library_is_probed_again_when_its_clock_runs_out(ctl, monkeypatch):
    # Our own constant, shortened so that the test need not wait a minute.
    monkeypatch.setattr(runner_mod, "UNAVAILABLE_REPROBE_SECONDS", 3.0)

    async def go():
        ctl("bootstrap_unavailable")
        r = make_runner(ctl)
        await r.start()
        try:
            await r.settled(10)
            with pytest.raises(SourceUnavailable) as info:
                await r.ready(timeout=0.1)
            assert info.value.retry_in is not None
            await asyncio.sleep(info.value.retry_in + 0.05)
            # Due: this poll starts the probe (a new worker) and is told to wait for it.
            started = time.monotonic()
            with pytest.raises(SourcePending) as probing:
                await r.ready(timeout=0.0)
            assert probing.value.reason == "probing"
            # A poll meanwhile waits for that probe; it does not start another.
            await r.settled(30)
            with pytest.raises(SourceUnavailable) as later:
                await r.ready(timeout=0.1)
            # The probe ran and its clock started again then, not at the first probe.
            assert later.value.retry_in is not None
            assert later.value.retry_in >= started + 3.0 - time.monotonic() - 0.01
        finally:
            await r.stop()

    run(go())


def test_bootstrap_deadline_kills(ctl):
    async def go():
        ctl("bootstrap_hang")
        r = make_runner(ctl, bootstrap_timeout=1.0)
        await r.start()
        try:
            assert await eventually(lambda: r.pid is not None)
            first = r.pid
            # "backoff" is set once the killed worker has been reaped; last_reason
            # alone is set just before the kill, while the worker may still run.
            await eventually(
                lambda: r.state.last_reason == "bootstrap_timeout" and r.state.state == "backoff"
            )
            assert r.state.last_reason == "bootstrap_timeout"
            # The hung worker is gone; at most its successor (also hanging) is alive.
            assert not alive(first)
            assert len([p for p in children_of(os.getpid()) if alive(p)]) <= 1
        finally:
            ctl("ok")
            await r.stop()

    run(go())


def device_source(
    ctl, enabled: bool | str = True, expected: int | None = None, timeout: float = 2.0
) -> DeviceSource:
    cfg = DeviceSourceConfig(
        enabled=enabled,
        interval=1.0,
        timeout=timeout,
        bootstrap_timeout=10.0,
        expected_devices=expected,
    )
    src = DeviceSource(
        "testdev",
        cfg,
        BACKEND,
        backend_config={"control": ctl.path, "devices": 2},
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        vendor="testvendor",
    )
    return src


@contextlib.asynccontextmanager
async def ready_device_source(ctl, **kwargs: Any) -> AsyncIterator[DeviceSource]:
    """device_source(), started and past its first bootstrap; closed (worker healthy) after."""
    src = device_source(ctl, **kwargs)
    await src.start()
    try:
        await src.wait_ready(10)
        yield src
    finally:
        ctl("ok")
        await src.close()


def counts(readings) -> dict[tuple[str, tuple[str, ...]], float]:
    """accel_devices and accel_devices_expected by (metric, labels)."""
    return {
        (r.metric, r.labels): r.value
        for r in readings
        if r.metric in ("accel_devices", "accel_devices_expected")
    }


def test_expected_count_is_exported_with_the_inventory_vendor(ctl):
    async def go():
        async with ready_device_source(ctl, expected=4) as src:
            # The inventory's vendor ("test") wins over the source's default.
            assert counts(await src.poll()) == {
                ("accel_devices", ("test",)): 2.0,
                ("accel_devices_expected", ("test",)): 4.0,
            }
            pid = src.runner.pid
            ctl("crash")
            with pytest.raises(WorkerError) as info:
                await src.poll()
            assert not alive(pid)
            # A dead worker still says how many devices there were and should be.
            assert counts(info.value.readings) == {
                ("accel_devices", ("test",)): 2.0,
                ("accel_devices_expected", ("test",)): 4.0,
            }

    run(go())


def test_no_expected_count_unless_configured(ctl):
    async def go():
        async with ready_device_source(ctl) as src:
            assert counts(await src.poll()) == {("accel_devices", ("test",)): 2.0}

    run(go())


@pytest.mark.parametrize("enabled", ["auto", True])
def test_missing_library_with_an_expected_count_is_a_failure(ctl, enabled):
    async def go():
        ctl("bootstrap_unavailable")
        async with ready_device_source(ctl, enabled=enabled, expected=8) as src:
            with pytest.raises(SourceError) as info:
                await src.poll()
            # Not "no such hardware here": the node is declared to have 8 devices.
            assert not isinstance(info.value, SourceUnavailable)
            assert info.value.reason == "library_not_found"
            assert counts(info.value.readings) == {("accel_devices_expected", ("testvendor",)): 8.0}

    run(go())


def test_missing_library_without_an_expected_count_stays_unavailable(ctl):
    async def go():
        ctl("bootstrap_unavailable")
        async with ready_device_source(ctl, enabled="auto") as src:
            with pytest.raises(SourceUnavailable) as info:
                await src.poll()
            assert info.value.readings == ()

    run(go())


@pytest.mark.parametrize("mode", ["short", "bad_reading", "ragged"])
def test_shape_mismatch_is_an_error_and_kills(ctl, mode):
    async def go():
        async with ready_device_source(ctl) as src:
            ok = await src.poll()
            assert {r.metric for r in ok} >= {
                "accel_device_up",
                "accel_device_info",
                "accel_power_watts",
            }
            pid = src.runner.pid
            ctl(mode)
            with pytest.raises(SourceError) as info:
                await src.poll()
            assert info.value.reason == "protocol_error"
            assert not alive(pid)
            down = {r.labels: r.value for r in info.value.readings if r.metric == "accel_device_up"}
            assert down == {("0", "TEST-0"): 0.0, ("1", "TEST-1"): 0.0}

    run(go())


def test_inventory_change_restarts_the_worker_and_the_same_poll_succeeds(ctl):
    async def go():
        # The poll spans a worker's start (a Python interpreter and its imports): a deadline
        # that a loaded CI machine's start fits in, as production's 10 s bootstrap does.
        async with ready_device_source(ctl, timeout=8.0) as src:
            await src.poll()
            first = src.runner.pid
            ctl("ok", devices=3)  # the worker finds a device it did not announce
            readings = await src.poll()
            up = {r.labels: r.value for r in readings if r.metric == "accel_device_up"}
            assert up == {("0", "TEST-0"): 1.0, ("1", "TEST-1"): 1.0, ("2", "TEST-2"): 1.0}
            assert src.runner.pid not in (None, first)
            assert not alive(first)
            assert src.runner.state.restarts == 1
            assert src.runner.state.last_reason == ""  # a restart, not a failure
            assert len([p for p in children_of(os.getpid()) if alive(p)]) == 1

    run(go())


def test_slow_answers_within_the_deadline_are_kept_and_beyond_it_killed(ctl):
    async def go():
        r = make_runner(ctl)
        await r.start()
        try:
            await wait_ready(r)
            pid = r.pid
            ctl("slow", delay=0.3)
            result = await r.call("poll", {}, timeout=5)
            assert result["devices"][0]["up"] is True and r.pid == pid
            ctl("slow", delay=3.0)
            with pytest.raises(WorkerError) as info:
                await r.call("poll", {}, timeout=0.5)
            assert info.value.reason == "timeout" and not alive(pid)
        finally:
            ctl("ok")
            await r.stop()

    run(go())


def test_a_worker_killed_at_bootstrap_counts_as_a_restart(ctl):
    async def go():
        ctl("bootstrap_hang")
        r = make_runner(ctl, bootstrap_timeout=0.5)
        await r.start()
        try:
            await eventually(lambda: r.state.restarts >= 1)
            assert r.state.restarts >= 1
        finally:
            ctl("ok")
            await r.stop()

    run(go())


def test_a_worker_logs_at_the_daemons_level_given_in_its_init_not_the_environment(ctl):
    from structlog.testing import capture_logs

    from exporter import log

    ctl("log_debug")

    async def go():
        r = make_runner(ctl)
        r.env = {k: v for k, v in r.env.items() if k != "ACCEL_EXPORTER_WORKER_LOG_LEVEL"}
        await r.start()
        try:
            await wait_ready(r)
        finally:
            await r.stop()

    log.configure("debug", "json")
    try:
        with capture_logs() as logs:
            run(go())
    finally:
        log.configure("info", "json")
    relayed = [e for e in logs if e["event"] == "backend debug line"]
    assert [(e["log_level"], e["devices"]) for e in relayed] == [("debug", 2)]
