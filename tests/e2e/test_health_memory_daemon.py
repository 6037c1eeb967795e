"""The health judge's memory through the real daemon (subprocess) and the fake NVML: a
restart after XID 79 still recommends reboot_node from its first verdict, ``accel-exporter
health clear`` against the running daemon clears it (and an unknown device changes
nothing), and a garbage, read-only, full or shared state directory keeps the daemon
serving and says so in /status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_nvml_daemon import nvml_config
from tests.e2e.test_state_dir_problems import tmpfs
from tests.helpers.cli import WITHOUT_RICH
from tests.helpers.daemon import REPO, Daemon, value

FILE = "health-nvml.json"


def config(state_dir: Path) -> dict[str, Any]:
    return {**nvml_config(), "health": {"state_dir": str(state_dir)}}


def device(d: Daemon, uuid: str) -> dict[str, Any]:
    (found,) = [dev for dev in d.get("/v1/devices").json()["devices"] if dev["uuid"] == uuid]
    return found  # type: ignore[no-any-return]


def first_verdict(d: Daemon, uuid: str) -> dict[str, Any]:
    """The device's entry in /v1/devices as soon as it has a verdict (asked every 20 ms)."""

    def judged() -> dict[str, Any] | None:
        found = [dev for dev in d.get("/v1/devices").json()["devices"] if dev["uuid"] == uuid]
        return found[0] if found and found[0]["verdict"] else None

    return d.wait_for(judged, interval=0.02)  # type: ignore[no-any-return]


def health_clear(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{WITHOUT_RICH}"}
    command = [sys.executable, "-m", "exporter", "health", "clear"]
    return subprocess.run(
        [*command, "--config.file", str(config_file), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(REPO),
    )


def xid_79_on_gpu_0(daemon_factory: Any, fake: Any, state_dir: Path) -> Daemon:
    d: Daemon = daemon_factory(config(state_dir), env=fake.env())
    me = {"device": "0", "uuid": fake.uuid(0)}
    d.wait_metric("accel_device_up", 1, **me)
    d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
    fake.inject_xid(0, 79)
    d.wait_metric("accel_device_recommended_action", 1, action="reboot_node", **me)
    return d


def test_a_restart_after_xid_79_still_says_reboot_node_until_an_operator_clears_it(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    fake = fake_nvml(2)
    u0, u1 = fake.uuid(0), fake.uuid(1)
    state_dir = tmp_path / "state"
    first = xid_79_on_gpu_0(daemon_factory, fake, state_dir)
    path = state_dir / FILE
    assert first.status()["sources"]["nvml"]["health_state"] == f"persisted to {path}"
    first.wait_for(lambda: json.loads(path.read_text())["devices"][u0]["events"], what="the file")
    assert first.stop()[0] == 0

    second: Daemon = daemon_factory(config(state_dir), env=fake.env())
    got = first_verdict(second, u0)
    assert (got["verdict"], got["health"], got["recommended_action"]) == (
        "failed",
        "Unhealthy",
        "reboot_node",
    )
    assert [r["reason"] for r in got["reasons"]] == ["xid_79"]
    metrics = second.metrics()
    assert value(metrics, "accel_device_health", device="0", uuid=u0, state="failed") == 1
    me = {"device": "0", "uuid": u0}
    assert value(metrics, "accel_device_recommended_action", action="reboot_node", **me) == 1
    assert device(second, u1)["verdict"] == "ok"

    # An unknown device: said, exit 1, nothing changed.
    before = path.read_bytes()
    nope = health_clear(second.config_file, "GPU-00000000-0000-0000-0000-000000000000")
    assert nope.returncode == 1 and "unknown device" in nope.stderr, nope.stderr
    assert path.read_bytes() == before and device(second, u0)["verdict"] == "failed"

    # The operator's clear, through the running daemon (which holds the file).
    done = health_clear(second.config_file, u0)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"nvml:0 {u0}: cleared xid_79 (asked by uid {os.getuid()}")
    assert f"done by the daemon (pid {second.pid})" in done.stdout and "persisted to" in done.stdout
    (line,) = [e for e in second.events if e.get("event") == "findings cleared"]
    assert (line["uuid"], line["why"], line["cleared"]) == (u0, "operator", ["xid_79"])
    assert line["by"].startswith(f"uid {os.getuid()}")
    second.wait_for(lambda: device(second, u0)["verdict"] == "ok", what="the clear")
    assert device(second, u0)["recommended_action"] == "none"
    assert second.stop()[0] == 0

    # And a restart after the clear remembers the clear.
    third: Daemon = daemon_factory(config(state_dir), env=fake.env())
    assert first_verdict(third, u0)["verdict"] == "ok"


def test_a_second_daemon_on_the_same_state_dir_reads_and_never_writes(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    fake = fake_nvml(1)
    state_dir = tmp_path / "state"
    first = xid_79_on_gpu_0(daemon_factory, fake, state_dir)
    path = state_dir / FILE
    first.wait_for(lambda: path.exists(), what="the file")
    second: Daemon = daemon_factory(config(state_dir), env=fake.env())
    assert first_verdict(second, fake.uuid(0))["recommended_action"] == "reboot_node"  # read
    said = second.wait_for(lambda: second.status()["sources"]["nvml"]["health_state"])
    assert said.startswith(f"not persisted: locked by pid {first.pid} ({path})"), said
    assert first.status()["sources"]["nvml"]["health_state"] == f"persisted to {path}"
    second.wait_metric("accel_exporter_state_errors_total", source="nvml", reason="locked")


@contextmanager
def garbage(path: Path) -> Iterator[Path]:
    path.mkdir()
    (path / FILE).write_text('{"format": 1, "devices": {"x": [tru')
    yield path


CASES = {
    "garbage": (garbage, "corrupt", "the file found at start was ignored (corrupt"),
    "read_only": (lambda p: tmpfs(p, read_only=True), "read_only", "not persisted: read_only"),
    "full": (lambda p: tmpfs(p, full=True), "no_space", "not persisted: no_space"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_state_dir_problem_keeps_the_daemon_serving_and_is_shown(
    case: str, daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    make, reason, says = CASES[case]
    fake = fake_nvml(1)
    with make(tmp_path / "state") as state_dir:
        d = xid_79_on_gpu_0(daemon_factory, fake, state_dir)
        said = d.status()["sources"]["nvml"]["health_state"]
        assert says in said, said
        d.wait_metric("accel_exporter_state_errors_total", source="nvml", reason=reason)
        assert d.get("/metrics").status == 200 and d.get("/readyz").status == 200
        if case == "garbage":  # writable: the next write replaced the garbage
            assert json.loads((state_dir / FILE).read_text())["source"] == "nvml"
        assert d.stop()[0] == 0


def test_a_reload_that_rebuilds_the_source_carries_the_memory_and_the_lock(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    from exporter.state_file import StateFileError, try_lock

    fake = fake_nvml(2)
    u0, u1 = fake.uuid(0), fake.uuid(1)
    state_dir = tmp_path / "state"
    d = xid_79_on_gpu_0(daemon_factory, fake, state_dir)
    path = state_dir / FILE
    lock = path.with_name(FILE + ".lock")
    # Ten reloads, each with a changed health section: every one rebuilds the nvml source.
    for k in range(10):
        changed = config(state_dir)
        changed["health"]["event_window"] = f"{3600 + k}s"
        d.config_file.write_text(yaml.safe_dump(changed))
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda k=k: sum(e.get("event") == "config reloaded" for e in d.events) == k + 1,
            30,
            what="the reload",
        )
        with pytest.raises(StateFileError, match=f"locked by pid {d.pid}"):
            try_lock(lock)  # never let go in between
    # The last worker watches events (an XID before that would reach none).
    names = [e.get("event") for e in d.events]
    last = len(names) - names[::-1].index("config reloaded")
    d.wait_for(
        lambda: "events watched" in [e.get("event") for e in d.events[last:]],
        what="the last worker's event set",
    )
    assert device(d, u0)["recommended_action"] == "reboot_node"  # remembered across them
    fake.inject_xid(1, 48)
    d.wait_for(
        lambda: json.loads(path.read_text())["devices"][u1]["events"][0][:2] == ["xid", "48"],
        what="the carried keeper writing the file",
    )
    assert d.status()["sources"]["nvml"]["health_state"] == f"persisted to {path}"
    assert not [e for e in d.events if e.get("event") == "health memory not written"]
    assert d.stop()[0] == 0
    try_lock(lock)  # the daemon is gone: free
