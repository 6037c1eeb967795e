"""The health judge's memory: what survives a restart, and what clears it (evidence of repair
only); the memory file, its keeper (reads, writes, problems, reloads, clear requests) and the
``health clear`` command without a daemon."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from exporter import state_file
from exporter.cli import main
from exporter.config.health import HealthConfig
from exporter.health import HealthJudge
from exporter.health_state import memory, requests
from exporter.model import Reading
from exporter.sources.health_keeper import HealthKeeper
from tests.unit.test_health import NOW, A, B, judged, up, xid
from tests.unit.test_state_file import held_by_another_process

LINK = ("accel_nvlink_up", (*A, "0"))
ECC = (*A, "uncorrected", "volatile")


def link(value: float) -> Reading:
    return Reading(*LINK, value)


def ecc(count: float) -> Reading:
    return Reading("accel_ecc_errors_total", ECC, count)


def judge_at(wall: list[float], boot: float = 0.0, **kw: Any) -> HealthJudge:
    return HealthJudge(clock=lambda: wall[0], wall=lambda: wall[0], boot_time=lambda: boot, **kw)


def restarted(old: HealthJudge, wall: list[float], *, rebooted: bool = False) -> HealthJudge:
    """A new judge given what ``old`` remembered, through the file's text."""
    text = memory.encode(memory.Memory("nvml", "boot", old.remembered()))
    kept, problems = memory.decode(json.loads(text))
    assert problems == []
    new = judge_at(wall)
    new.recall(kept.devices, rebooted=rebooted)
    return new


def cleared(logs: list[dict[str, Any]], why: str) -> list[list[str]]:
    return [e["cleared"] for e in logs if e["event"] == "findings cleared" and e["why"] == why]


def recovery(name: str, ident: tuple[str, str] = A) -> list[Reading]:
    names = ("none", "gpu_reset", "node_reboot")
    return [
        Reading("accel_device_recovery_action", (*ident, n), 1.0 if n == name else 0.0)
        for n in names
    ]


# -- what a restart keeps -------------------------------------------------------------


def test_a_restart_keeps_every_event_driven_finding() -> None:
    wall = [NOW]
    old = judge_at(wall)
    lost = [up(B, 0.0), Reading("accel_device_down_reason_info", (*B, "gpu_lost"), 1.0)]
    old.judge([up(A), *xid(79, NOW - 5), link(1.0), ecc(1.0), *lost])
    wall[0] = NOW + 1
    old.judge([up(A), ecc(2.0), *lost])  # growth
    new = restarted(old, wall)
    # The first verdict of the new judge, from a worker that counts XIDs from zero.
    states, reasons, todo, why = judged([up(A), link(0.0), *lost], new)
    assert (states[A], todo[A]) == ("failed", "reboot_node")
    assert reasons[A] == {"xid_79", "link_down", "ecc_uncorrected_growth"}
    assert why[A]["xid_79"] == "reboot_node"
    # B was lost before the restart: back now, it was reset.
    with capture_logs() as logs:
        judged([up(A), up(B)], new)
    assert [e["uuid"] for e in logs if e["event"] == "device back after a reset"] == ["GPU-b"]


def test_the_memory_file_round_trips_and_refuses_what_it_is_not() -> None:
    mem = memory.DeviceMemory("0", {("xid", "79"): NOW}, {("uncorrected", "volatile"): 3.0})
    mem.links_up.add(("accel_nvlink_up", ("0",)))
    mem.lost, mem.recovery_action, mem.cleared_at = True, "gpu_reset", NOW - 9
    doc = memory.Memory("nvml", "boot-a", {"GPU-a": mem})
    text = memory.encode(doc)
    assert memory.decode(json.loads(text)) == (doc, [])
    assert memory.encode(memory.decode(json.loads(text))[0]) == text  # stable text
    with pytest.raises(ValueError, match="format"):
        memory.decode({**json.loads(text), "format": 2})
    raw = json.loads(text)
    raw["devices"]["GPU-b"] = {"device": "1", "events": [["xid", "79", "soon"]]}
    kept, problems = memory.decode(raw)
    assert list(kept.devices) == ["GPU-a"] and problems == ["GPU-b: an event is not a time"]


# -- what clears it ------------------------------------------------------------------


def test_a_new_boot_clears_what_a_reboot_resolves_and_restarts_the_baselines() -> None:
    wall = [NOW]
    old = judge_at(wall)
    events = [*xid(79, NOW - 9), *xid(48, NOW - 9), *xid(54, NOW - 9)]
    old.judge([up(A), *events, link(1.0), ecc(5.0)])
    with capture_logs() as logs:
        new = restarted(old, wall, rebooted=True)
    assert cleared(logs, "reboot") == [["xid_48", "xid_79"]]
    # service stays (a reboot repairs no hardware); a link not up since the boot is no news.
    _, reasons, todo, _ = judged([up(A), link(0.0)], new)
    assert reasons[A] == {"xid_54"} and todo[A] == "inspect_hardware"
    # Volatile counters restarted with the boot: 1 after 5 is no growth, 2 after 1 is.
    assert "ecc_uncorrected_growth" not in judged([up(A), ecc(1.0)], new)[1][A]
    assert "ecc_uncorrected_growth" in judged([up(A), ecc(2.0)], new)[1][A]


def test_recovery_action_back_to_none_clears_the_xids_a_reboot_resolves() -> None:
    wall = [NOW]
    judge = judge_at(wall)
    events = [*xid(79, NOW - 9), *xid(54, NOW - 9)]
    assert judged([up(A), *events, *recovery("node_reboot")], judge)[2][A] == "inspect_hardware"
    wall[0] = NOW + 5
    with capture_logs() as logs:
        _, reasons, _, why = judged([up(A), *events, *recovery("none")], judge)
    assert reasons[A] == {"xid_54"} and set(why[A]) == {"xid_54"}
    assert cleared(logs, "recovery_action_none") == [["xid_79"]]
    # A new XID after that moment counts again.
    assert "xid_79" in judged([up(A), *xid(79, NOW + 6), *recovery("none")], judge)[1][A]


def test_recovery_action_back_to_none_across_a_restart() -> None:
    wall = [NOW]
    old = judge_at(wall)
    old.judge([up(A), *xid(79, NOW - 9), *recovery("node_reboot")])
    new = restarted(old, wall)  # the same boot: a driver reload, say
    assert judged([up(A), *recovery("none")], new)[2][A] == "none"
    # Never read a recovery action before: none is no transition, nothing clears.
    fresh = judge_at(wall)
    assert judged([up(A), *xid(79, NOW - 9), *recovery("none")], fresh)[2][A] == "reboot_node"


def test_the_window_passing_clears_an_event_logged_once() -> None:
    wall = [NOW]
    judge = judge_at(wall, window=60.0)
    judged([up(A), *xid(79, NOW - 5)], judge)
    wall[0] = NOW + 56
    with capture_logs() as logs:
        assert judged([up(A)], judge)[2][A] == "none"
        judged([up(A)], judge)
    assert cleared(logs, "window") == [["xid_79"]]


def test_an_operator_clear_clears_events_growth_and_lost_but_not_baselines() -> None:
    wall = [NOW]
    judge = judge_at(wall)
    lost = [up(A, 0.0), Reading("accel_device_down_reason_info", (*A, "gpu_lost"), 1.0)]
    judge.judge([up(A), *xid(54, NOW - 9), link(1.0), ecc(1.0)])
    judge.judge([up(A), ecc(2.0)])
    judge.judge(lost)
    with capture_logs() as logs:
        got = judge.clear(A, by="uid 0 (root)")
    assert got == ["ecc_uncorrected_growth", "lost", "xid_54"]
    (line,) = [e for e in logs if e["event"] == "findings cleared"]
    assert (line["why"], line["by"], line["uuid"]) == ("operator", "uid 0 (root)", "GPU-a")
    # The worker still reports the old XID: it stays cleared; the link baseline stays.
    _, reasons, todo, _ = judged([up(A), *xid(54, NOW - 9), link(0.0)], judge)
    assert reasons[A] == {"link_down"} and todo[A] == "drain_p2p"
    # Back from the clear, no reset is assumed (it was cleared, not reset).
    with capture_logs() as logs:
        judged([up(A)], judge)
    assert not [e for e in logs if e["event"] == "device back after a reset"]
    # An event after the clear counts.
    wall[0] = NOW + 1
    assert judged([up(A), *xid(54, NOW + 1)], judge)[2][A] == "inspect_hardware"


def test_a_device_in_no_poll_for_a_window_is_forgotten() -> None:
    wall = [NOW]
    judge = judge_at(wall, window=100.0)
    judge.judge([up(A), up(B), Reading("accel_nvlink_up", (*B, "0"), 1.0), *xid(54, NOW, B)])
    wall[0] = NOW + 50
    judge.judge([up(A)])
    assert set(judge.remembered()) == {"GPU-a", "GPU-b"}
    wall[0] = NOW + 101
    with capture_logs() as logs:
        judge.judge([up(A)])
    assert set(judge.remembered()) == {"GPU-a"} and B not in judge.latest
    assert [e["uuid"] for e in logs if e["event"] == "device forgotten"] == ["GPU-b"]


def test_a_recalled_device_named_otherwise_keeps_its_memory() -> None:
    wall = [NOW]
    old = judge_at(wall)
    old.judge([up(A), *xid(79, NOW - 9)])
    new = restarted(old, wall)
    renamed = ("7", "GPU-a")
    assert judged([up(renamed)], new)[2][renamed] == "reboot_node"
    assert new.remembered()["GPU-a"].device == "7"


# -- the keeper: the file around each poll -------------------------------------------


@pytest.fixture
def daemon_writes() -> Iterator[None]:
    was = state_file.WRITES["enabled"]
    state_file.enable_writes()
    try:
        yield
    finally:
        state_file.WRITES["enabled"] = was


def poll(keeper: HealthKeeper, readings: list[Reading]) -> Any:
    async def go() -> Any:
        await keeper.before_poll()
        keeper.judge.judge(readings)
        await keeper.after_poll()
        return keeper.judge.latest

    return asyncio.run(go())


def keeper(where: Path, boot: str = "boot-a", source: str = "nvml") -> HealthKeeper:
    return HealthKeeper(source, HealthConfig(state_dir=str(where)), boot=boot)


def test_the_keeper_writes_on_change_only_and_a_new_daemon_starts_from_it(
    tmp_path: Path, daemon_writes: None
) -> None:
    first = keeper(tmp_path)
    assert first.describe().startswith("not read yet")
    now = time.time()
    poll(first, [up(A), *xid(79, now - 5)])
    path = tmp_path / "health-nvml.json"
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["source"], doc["boot_id"]) == (1, "nvml", "boot-a")
    assert doc["devices"]["GPU-a"]["events"] == [["xid", "79", now - 5]]
    inode = path.stat().st_ino
    poll(first, [up(A)])  # nothing changed: not written (a write is a new inode)
    assert path.stat().st_ino == inode
    assert first.describe() == f"persisted to {path}"
    first.close()
    second = keeper(tmp_path)
    latest = poll(second, [up(A)])  # its first verdict
    assert (latest[A].state, latest[A].action) == ("failed", "reboot_node")
    second.close()


def test_a_garbage_file_is_ignored_counted_and_replaced(
    tmp_path: Path, daemon_writes: None
) -> None:
    path = tmp_path / "health-nvml.json"
    path.write_text('{"format": 1, "devices": [tru')
    k = keeper(tmp_path)
    assert poll(k, [up(A)])[A].state == "ok"
    assert k.errors == {"corrupt": 1}
    assert "ignored (corrupt" in k.describe()
    assert json.loads(path.read_text())["devices"]["GPU-a"]["device"] == "0"
    k.close()


def test_an_unwritable_state_dir_keeps_the_memory_in_process(
    tmp_path: Path, daemon_writes: None
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    k = keeper(blocker / "state")  # ENOTDIR: a directory under a regular file
    latest = poll(k, [up(A), *xid(79, time.time() - 5)])
    assert latest[A].action == "reboot_node"
    assert k.describe().startswith("not persisted: write_failed")
    assert k.errors == {"unreadable": 1, "write_failed": 1}  # ENOTDIR, read and write
    assert poll(k, [up(A)])[A].action == "reboot_node"  # remembered in process
    k.close()


def test_a_file_another_daemon_holds_is_read_and_never_written(
    tmp_path: Path, daemon_writes: None
) -> None:
    path = tmp_path / "health-nvml.json"
    first = keeper(tmp_path)
    poll(first, [up(A), *xid(79, time.time() - 5)])
    first.close()
    before = path.read_bytes()
    requests.ask(tmp_path, "nvml", "GPU-a")
    with held_by_another_process(path.with_name(path.name + ".lock")) as pid:
        second = keeper(tmp_path)
        second._sleep = lambda _s: None  # do not wait for the other process
        latest = poll(second, [up(A), *xid(48, time.time() - 1)])
        assert latest[A].action == "reboot_node"  # read: what the other one remembered
        assert path.read_bytes() == before
        assert second.describe().startswith(f"not persisted: locked by pid {pid}")
        assert second.errors == {"locked": 1}
        # Clear requests are the lock holder's to take.
        assert [p.suffix for p in requests.directory(tmp_path).iterdir()] == [".request"]
        second.close()


def test_a_clear_request_is_taken_done_written_and_answered(
    tmp_path: Path, daemon_writes: None
) -> None:
    k = keeper(tmp_path)
    poll(k, [up(A), up(B), *xid(79, time.time() - 5)])
    token = requests.ask(tmp_path, "nvml", "nvml:0")
    unknown = requests.ask(tmp_path, "nvml", "GPU-zzz")
    with capture_logs() as logs:
        latest = poll(k, [up(A), up(B)])
    assert latest[A].action == "none"  # the poll that took it already judges without it
    done = requests.result(tmp_path, "nvml", token, 0)
    assert done is not None and done.status == "cleared"
    assert (done.uuid, done.device, done.cleared) == ("GPU-a", "nvml:0", ["xid_79"])
    assert done.by.startswith(f"uid {os.getuid()}") and done.pid == os.getpid()
    assert done.persisted.startswith("persisted to")
    nothing = requests.result(tmp_path, "nvml", unknown, 0)
    assert nothing is not None and nothing.status == "unknown_device"
    assert list(requests.directory(tmp_path).iterdir()) == []
    assert [e["why"] for e in logs if e["event"] == "findings cleared"] == ["operator"]
    k.close()
    # What a restart finds: cleared.
    again = keeper(tmp_path)
    assert poll(again, [up(A), *xid(79, time.time() - 5)])[A].action == "none"
    again.close()


def test_a_reload_hands_the_judge_and_the_lock_over_without_a_gap(
    tmp_path: Path, daemon_writes: None
) -> None:
    from tests.unit.test_state_file import can_lock_elsewhere

    lock = tmp_path / "health-nvml.json.lock"
    old = keeper(tmp_path)
    poll(old, [up(A), *xid(79, time.time() - 5)])
    new = keeper(tmp_path)  # built by the reload, before the old source is closed
    old.close()
    assert not can_lock_elsewhere(lock)
    config = HealthConfig(state_dir=str(tmp_path), event_window=120.0)
    carried = new.take_over(old, config)
    assert carried is old and carried.judge.window == 120.0
    assert poll(carried, [up(A)])[A].action == "reboot_node"
    assert not can_lock_elsewhere(lock)
    carried.close()  # closed for good
    assert can_lock_elsewhere(lock)
    # A reload that moves state_dir: the memory goes on, written to the new directory.
    first = keeper(tmp_path)
    poll(first, [up(A)])
    elsewhere = HealthConfig(state_dir=str(tmp_path / "moved"))
    moved = keeper(tmp_path / "moved").take_over(first, elsewhere)
    assert moved is not first and moved.judge is first.judge
    poll(moved, [up(A)])
    assert "GPU-a" in json.loads((tmp_path / "moved" / "health-nvml.json").read_text())["devices"]
    moved.close()
    assert can_lock_elsewhere(lock) and can_lock_elsewhere(lock.parent / "moved" / lock.name)


def test_without_a_state_dir_the_memory_is_in_process_only() -> None:
    k = HealthKeeper("nvml", HealthConfig(), boot="b")
    poll(k, [up(A), *xid(79, time.time() - 5)])
    assert k.path is None and k.describe().startswith("not persisted: no health.state_dir")


# -- health clear without a daemon ----------------------------------------------------


def run_clear(capsys: Any, state_dir: Path, device: str) -> tuple[int, str, str]:
    code = main(["health", f"--health.state-dir={state_dir}", "clear", device])
    out, err = capsys.readouterr()
    return code, out, err


def test_health_clear_without_a_daemon_clears_the_file_itself(
    tmp_path: Path, daemon_writes: None, capsys: Any
) -> None:
    k = keeper(tmp_path, boot=state_file.boot_id())
    poll(k, [up(A), up(B), *xid(79, time.time() - 5), *xid(54, time.time() - 5, B)])
    k.close()  # the daemon stopped
    path = tmp_path / "health-nvml.json"
    before = path.read_bytes()
    code, out, err = run_clear(capsys, tmp_path, "GPU-nope")
    assert code == 1 and "unknown device 'GPU-nope'" in err and "nvml:0 GPU-a" in err
    assert path.read_bytes() == before  # nothing changed
    code, out, _ = run_clear(capsys, tmp_path, "GPU-A")  # any case
    assert code == 0 and out.startswith("nvml:0 GPU-a: cleared xid_79 (asked by uid")
    assert "cleared in the file" in out
    again = keeper(tmp_path, boot=state_file.boot_id())
    latest = poll(again, [up(A), up(B)])
    assert (latest[A].action, latest[B].action) == ("none", "inspect_hardware")
    again.close()


def test_health_clear_needs_a_state_dir(capsys: Any) -> None:
    code = main(["health", "clear", "GPU-a"])
    assert code == 2 and "health.state_dir is not set" in capsys.readouterr().err


def test_everything_of_a_device_gone_for_a_window_is_pruned_under_uuid_churn() -> None:
    # MIG/partition churn: uuids that come once and never again. Whatever the judge
    # keeps per device (the counters a growth rule watches, the domains, a recalled
    # device never placed) goes a window after the last poll that had it.
    wall = [NOW]
    judge = judge_at(wall, window=100.0)
    old = judge_at(wall)
    old.judge([up(B), *xid(54, NOW, B)])
    judge.recall(old.remembered(), rebooted=False)  # GPU-b recalled, never polled again
    churned = [(str(i), f"MIG-{i}") for i in range(2, 6)]
    judge.judge(
        [
            up(A),
            *(
                Reading("accel_intel_ras_uncorrectable_errors_total", (*c, "reset"), 1.0)
                for c in churned
            ),
            *(Reading("accel_device_domain_info", (*c, "partition", "p0"), 1.0) for c in churned),
        ]
    )
    assert judge._counted and judge._unplaced
    wall[0] = NOW + 101
    judge.judge([up(A)])
    assert set(judge.remembered()) == {"GPU-a"}
    left = {
        "counted": [k for k in judge._counted if k[:2] != A],
        "unplaced": dict(judge._unplaced),
        "domains": [k for k in judge._domains if k != A],
        "seen": [k for k in judge._seen if k != A],
    }
    assert left == {"counted": [], "unplaced": {}, "domains": [], "seen": []}
