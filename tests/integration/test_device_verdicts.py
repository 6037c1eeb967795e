"""The verdict records a device source hands the scheduler (``DeviceSource.verdicts``),
against a real worker on the test backend that crashes, fails its bootstrap or reports
a device lost: failed on evidence about the device only, unknown for the exporter's own
trouble, and the health families derived from the same records."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from exporter import backoff
from exporter.errors import SourceError, SourcePending
from exporter.sources.device import DeviceSource
from exporter.verdict import DeviceHealth
from tests.helpers.test_sources import control_writer
from tests.integration.test_worker_runner import device_source, ready_device_source, run

T0, T1 = ("0", "TEST-0"), ("1", "TEST-1")


@pytest.fixture(autouse=True)
def fast_restarts(monkeypatch):
    # Our own runner's backoff constants, not a binding: keeps respawn tests short.
    monkeypatch.setattr(backoff, "RESTART_BASE_SECONDS", 0.2)


@pytest.fixture
def ctl(tmp_path):
    return control_writer(tmp_path / "control.json")


def by_device(src: DeviceSource) -> dict[tuple[str, str], DeviceHealth]:
    return {(v.device, v.uuid): v for v in src.verdicts()}


def states(src: DeviceSource) -> dict[tuple[str, str], str]:
    return {key: v.state for key, v in by_device(src).items()}


def one_hot(readings: Any) -> dict[tuple[str, ...], str]:
    """The state at 1 of each device's accel_device_health; absent when none is."""
    return {
        r.labels[:2]: r.labels[2]
        for r in readings
        if r.metric == "accel_device_health" and r.value == 1
    }


async def poll(src: DeviceSource) -> tuple[list[Any], str]:
    """One poll's readings, and its failure reason ("" for a result)."""
    try:
        return list(await src.poll()), ""
    except SourceError as exc:
        return list(exc.readings), exc.reason


async def poll_until_ok(src: DeviceSource, seen: list[dict], timeout: float = 20.0) -> None:
    """Poll until both devices are ok again, keeping every poll's verdict states in ``seen``."""
    end = time.monotonic() + timeout
    while True:
        readings, _ = await poll(src)
        seen.append(states(src))
        # The health families are the records' own, poll by poll.
        assert one_hot(readings) == {k: s for k, s in seen[-1].items() if s != "unknown"}
        if seen[-1] == {T0: "ok", T1: "ok"}:
            return
        assert time.monotonic() < end, seen[-3:]
        await asyncio.sleep(0.1)


def test_a_crashed_worker_makes_every_verdict_unknown_never_failed(ctl):
    async def go():
        async with ready_device_source(ctl, timeout=8.0) as src:
            readings = await src.poll()
            assert states(src) == {T0: "ok", T1: "ok"} and one_hot(readings) == {
                T0: "ok",
                T1: "ok",
            }
            ctl("crash")
            readings, reason = await poll(src)
            assert reason == "crashed"
            got = by_device(src)
            assert {k: (v.state, v.unknown_why) for k, v in got.items()} == {
                T0: ("unknown", "worker restarting: crashed"),
                T1: ("unknown", "worker restarting: crashed"),
            }
            # Down (the device does not answer), but no state holds and no device_down.
            up = {r.labels: r.value for r in readings if r.metric == "accel_device_up"}
            assert up == {T0: 0.0, T1: 0.0}
            assert one_hot(readings) == {}
            reasons = [r for r in readings if r.metric == "accel_device_health_reason_info"]
            assert reasons == []
            ctl("ok")
            seen: list[dict] = []
            await poll_until_ok(src, seen)
            assert all("failed" not in s.values() for s in seen), seen

    run(go())


def test_a_worker_that_cannot_start_leaves_the_devices_unknown(ctl):
    async def go():
        async with ready_device_source(ctl, timeout=2.0) as src:
            await src.poll()
            ctl("bootstrap_error")  # every new worker now fails its bootstrap
            _, reason = await poll(src)  # the running worker still answers
            assert reason == ""
            ctl("crash")
            _, reason = await poll(src)
            assert reason == "crashed"
            ctl("bootstrap_error")
            reasons, seen = set(), []
            end = time.monotonic() + 10
            while time.monotonic() < end and "init_failed" not in reasons:
                readings, reason = await poll(src)
                reasons.add(reason)
                seen.append(by_device(src))
                assert one_hot(readings) == {}, reason
                await asyncio.sleep(0.1)
            assert "init_failed" in reasons, reasons
            # Unknown throughout, with why: a worker of ours that cannot start is no
            # evidence about the GPUs.
            assert all(v.state == "unknown" for poll_ in seen for v in poll_.values())
            last = seen[-1]
            assert {v.unknown_why for v in last.values()} <= {
                "worker restarting: init_failed",
                "worker starting",
            }, last
            ctl("ok")
            await poll_until_ok(src, [])

    run(go())


def test_a_device_the_worker_reports_lost_is_failed_with_device_down(ctl):
    async def go():
        async with ready_device_source(ctl) as src:
            await src.poll()
            ctl("ok", lost=[1])
            readings = await src.poll()
            got = by_device(src)
            assert (got[T1].state, got[T1].reason_names(), got[T1].action) == (
                "failed",
                ("device_down",),
                "reset_device",
            )
            assert got[T0].state == "ok"
            assert one_hot(readings) == {T0: "ok", T1: "failed"}
            down = [r.labels for r in readings if r.metric == "accel_device_down_reason_info"]
            assert down == [(*T1, "gpu_lost")]

    run(go())


def test_a_reload_leaves_the_devices_unknown_until_the_new_worker_answers(ctl):
    async def go():
        async with ready_device_source(ctl) as old:
            await old.poll()
            new = device_source(ctl)
            new.adopt(old)
            assert {k: (v.state, v.unknown_why) for k, v in by_device(new).items()} == {
                T0: ("unknown", "reloading"),
                T1: ("unknown", "reloading"),
            }
            assert one_hot(new.carried()) == {}
            await new.start()
            try:
                await new.wait_ready(10)
                seen: list[dict] = []
                await poll_until_ok(new, seen)
                assert all("failed" not in s.values() for s in seen), seen
            finally:
                await new.close()

    run(go())


def test_a_poll_while_the_new_worker_starts_is_unknown_with_its_reason(ctl):
    async def go():
        async with ready_device_source(ctl, timeout=2.0) as src:
            await src.poll()
            ctl("crash")
            await poll(src)
            ctl("bootstrap_hang")  # the next worker takes its time to start
            pending = None
            end = time.monotonic() + 10
            while pending is None and time.monotonic() < end:
                try:
                    await src.poll()
                except SourcePending as exc:
                    pending = exc
                except SourceError:
                    await asyncio.sleep(0.1)
            assert pending is not None
            assert {v.unknown_why for v in src.verdicts()} == {"worker starting"}
            # Which devices there are and that they are down stay shown, not a verdict.
            assert one_hot(pending.readings) == {}
            assert {r.labels for r in pending.readings if r.metric == "accel_device_up"} == {
                T0,
                T1,
            }
            ctl("ok")
            await poll_until_ok(src, [])

    run(go())
