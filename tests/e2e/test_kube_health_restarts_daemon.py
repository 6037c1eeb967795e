"""outputs.kubernetes in the real daemon across restarts and SIGHUPs, alone (no DRA
attribution), and with its own NVML worker killed (the fake NVML, the fake API server).

The GPU fails by a remapped-row failure, a state the fake reports at every poll, so
it is still failed after a restart whatever the daemon remembers of past events."""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from exporter.outputs.kube_rules import HEALTHY_SINCE, RULES_PATH, parse_rfc3339, rule_name
from tests.e2e.test_nvml_daemon import OTHERS_OFF
from tests.fakes.kube_api import FakeApiServer, node
from tests.helpers.daemon import Daemon
from tests.helpers.kube_writer import NODE, TOKEN, condition, nvidia_slices
from tests.helpers.pki import make_pki
from tests.helpers.wait import eventually

CLEAR_AFTER = 6.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def api(pki: Path) -> Any:
    with FakeApiServer(pki, token=TOKEN) as server:
        server.nodes = {NODE: node(NODE)}
        yield server


def daemon_config(api: FakeApiServer, pki: Path, tmp_path: Path, **writer: Any) -> dict[str, Any]:
    """The daemon's config: fake NVML polled every second, the writer on the fake API
    server (the one place its access keys are written), no DRA attribution."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    access = {"api_server": api.url, "token_file": str(token), "ca_file": str(pki / "ca.pem")}
    return {
        "sources": {**OTHERS_OFF, "nvml": {"interval": "1s", "slow_interval": "1s"}},
        "workload": {"enabled": False},
        "kubernetes": {**access, "node_name": NODE},
        "outputs": {
            "kubernetes": {
                "enabled": True,
                "interval": "1s",
                "timeout": "2s",
                **writer,
            }
        },
    }


def writer_status(d: Daemon) -> dict[str, Any]:
    return d.status()["outputs"]["kubernetes"]  # type: ignore[no-any-return]


def rule_writes(api: FakeApiServer, since: int = 0) -> list[tuple[str, Any]]:
    """(method, body) of each DeviceTaintRule write after request number ``since``."""
    return [
        (r["method"], r["body"])
        for r in api.requests[since:]
        if r["path"].startswith(RULES_PATH) and r["method"] in ("POST", "PATCH", "DELETE")
    ]


def lowered(writes: list[tuple[str, Any]]) -> list[Any]:
    """The writes that delete a rule or set an effect other than NoExecute."""
    return [
        body
        for method, body in writes
        if method == "DELETE"
        or (
            method == "PATCH"
            and ((body.get("spec") or {}).get("taint") or {}).get("effect")
            not in (None, "NoExecute")
        )
    ]


def sockets_to(pid: int, port: int) -> int:
    """How many of ``pid``'s sockets are connected to ``port`` on loopback (/proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[9] in inodes:
                count += 1
    return count


def threads_of(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def failed_with_a_no_execute_rule(fake: Any, api: FakeApiServer, d: Daemon) -> str:
    """GPU 1 fails; returns its rule's name once the rule is at NoExecute."""
    api.slices = nvidia_slices([fake.uuid(0), fake.uuid(1)])
    fake.device(1).remapped_failure = 1
    name = rule_name(NODE, fake.uuid(1))
    d.wait_for(
        lambda: api.rules[name]["spec"]["taint"]["effect"] == "NoExecute",
        timeout=60,
        what="the failed GPU's rule at NoExecute",
    )
    return name


def reloaded(d: Daemon, count: int) -> bool:
    return sum(e.get("event") == "config reloaded" for e in d.events) >= count


def test_a_daemon_restart_keeps_the_rule_until_ok_has_held_for_clear_after(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    fake = fake_nvml(2)
    config = daemon_config(
        api, pki, tmp_path, taint_effect="NoExecute", clear_after=f"{CLEAR_AFTER:g}s"
    )
    first = daemon_factory(config, env=fake.env())
    name = failed_with_a_no_execute_rule(fake, api, first)
    first.stop()
    # Restarted with the GPU still failed: its first passes run before any poll.
    mark = len(api.requests)
    second = daemon_factory(config, env=fake.env())
    second.wait_for(lambda: writer_status(second)["reconciles"] >= 6, timeout=60, what="passes")
    assert lowered(rule_writes(api, mark)) == []
    assert api.rules[name]["spec"]["taint"]["effect"] == "NoExecute"
    assert writer_status(second)["rules"][fake.uuid(1)]["effect"] == "NoExecute"
    # Repaired: the clock starts on the rule, and a restart midway continues it.
    fake.device(1).remapped_failure = 0
    since_text = second.wait_for(
        lambda: api.rules[name]["metadata"]["annotations"].get(HEALTHY_SINCE),
        timeout=30,
        what="the healthy-since annotation",
    )
    second.stop()
    third = daemon_factory(config, env=fake.env())
    seen = []
    while name in api.rules:
        rule = api.rules.get(name)
        if rule is not None:
            seen.append(
                (
                    time.time(),
                    rule["spec"]["taint"]["effect"],
                    rule["metadata"]["annotations"].get(HEALTHY_SINCE),
                )
            )
        assert time.time() < parse_rfc3339(since_text) + 60, "never deleted"
        time.sleep(0.05)  # sampling the rule until it goes
    gone = time.time()
    since = parse_rfc3339(since_text)
    assert since is not None
    assert {effect for _, effect, _ in seen} == {"NoExecute"}
    assert {text for _, _, text in seen} == {since_text}  # not restarted by the restart
    # Not deleted before clear_after had passed on the clock the first restart started
    # (the annotation has whole seconds).
    assert gone >= since + CLEAR_AFTER - 1
    assert "kubernetes write failed" not in [e.get("event") for e in third.events]
    assert api.invalid == []


def test_sighup_keeps_the_writer_and_a_changed_one_takes_over(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    fake = fake_nvml(2)
    config = daemon_config(api, pki, tmp_path, taint_effect="NoExecute")
    d = daemon_factory(config, env=fake.env())
    name = failed_with_a_no_execute_rule(fake, api, d)
    api.status = 500  # a few failed passes, to be counted across the reloads
    d.wait_for(lambda: writer_status(d)["failures"].get("http_500", 0) >= 3, what="failures")
    api.status = None
    mark = len(api.requests)
    before = writer_status(d)
    d.signal(signal.SIGHUP)  # the same file: the same writer, untouched
    d.wait_for(lambda: reloaded(d, 1), what="the reload")
    event = [e for e in d.events if e.get("event") == "config reloaded"][-1]
    assert event["outputs_unchanged"] == ["kubernetes"]
    after = writer_status(d)
    assert after["reconciles"] >= before["reconciles"]
    assert after["failures"]["http_500"] >= before["failures"]["http_500"]
    # A changed outputs.kubernetes: a new writer, the old one stopped and joined first.
    changed = {**config}
    changed["outputs"] = {"kubernetes": {**config["outputs"]["kubernetes"], "interval": "2s"}}
    d.config_file.write_text(yaml.safe_dump(changed))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: reloaded(d, 2), what="the second reload")
    event = [e for e in d.events if e.get("event") == "config reloaded"][-1]
    assert event["outputs_unchanged"] == []
    status = d.wait_for(
        lambda: (s := writer_status(d))["reconciles"] > after["reconciles"] + 2 and s,
        what="the new writer's passes",
    )
    assert status["failures"]["http_500"] >= before["failures"]["http_500"]
    assert status["rules"][fake.uuid(1)]["effect"] == "NoExecute"
    assert lowered(rule_writes(api, mark)) == []
    assert api.rules[name]["spec"]["taint"]["effect"] == "NoExecute"


def ten_sighups_on_a_stuck_server(d: Daemon, config: dict[str, Any], port: int) -> None:
    """Ten reloads, each changing outputs.kubernetes (so each replaces the writer);
    then neither the daemon's threads nor its connections to the API server grew."""
    d.wait_for(lambda: writer_status(d)["failures"].get("timeout", 0) >= 1, timeout=60)
    baseline = threads_of(d.pid)
    for i in range(10):
        interval = "1s" if i % 2 else "1500ms"
        changed = {**config}
        changed["outputs"] = {
            "kubernetes": {**config["outputs"]["kubernetes"], "interval": interval}
        }
        d.config_file.write_text(yaml.safe_dump(changed))
        d.signal(signal.SIGHUP)
        d.wait_for(lambda n=i + 1: reloaded(d, n), timeout=60, what=f"reload {i + 1}")
    eventually(
        lambda: threads_of(d.pid) <= baseline,
        timeout=30,
        what=f"the daemon's threads back to {baseline}",
    )
    eventually(lambda: sockets_to(d.pid, port) <= 1, timeout=30, what="one connection at most")
    failures = writer_status(d)["failures"]
    assert failures.get("timeout", 0) >= 2 and set(failures) == {"timeout"}


def test_ten_sighups_against_a_server_that_hangs_after_tls_grow_nothing(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    fake = fake_nvml(1)
    api.hang_after_tls = True
    config = daemon_config(api, pki, tmp_path, timeout="1s")
    d = daemon_factory(config, env=fake.env())
    ten_sighups_on_a_stuck_server(d, config, urlsplit(api.url).port or 0)


@pytest.mark.skipif(
    importlib.util.find_spec("exporter.kube") is None,
    reason="needs exporter/kube.py (the kube helper's one-deadline client): urlopen's"
    " timeout bounds each read, so a trickling server pins the writer",
)
def test_ten_sighups_against_a_trickling_server_grow_nothing(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    fake = fake_nvml(1)
    api.trickle = 0.2
    config = daemon_config(api, pki, tmp_path, timeout="1s")
    d = daemon_factory(config, env=fake.env())
    ten_sighups_on_a_stuck_server(d, config, urlsplit(api.url).port or 0)


def test_outputs_kubernetes_alone_writes_a_rule_for_a_failed_dra_gpu(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    """No workload source, no DRA attribution: the writer lists the slices itself."""
    fake = fake_nvml(2)
    api.slices = nvidia_slices([fake.uuid(0), fake.uuid(1)])
    d = daemon_factory(daemon_config(api, pki, tmp_path), env=fake.env())
    assert "workload" not in d.status()["sources"]
    d.wait_for(lambda: fake.state.event_sets >= 1, timeout=60, what="the worker's event set")
    d.wait_for(lambda: (condition(api) or {}).get("status") == "True", timeout=30)
    fake.inject_xid(1, 79)
    d.wait_for(lambda: len(api.rules) == 1, timeout=30, what="a DeviceTaintRule")
    (rule,) = api.rules.values()
    # Xid 79 asks a node reboot, which reaches every GPU of the node: the pool-wide rule.
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": NODE}
    assert rule["spec"]["taint"] == {
        "key": "accel-exporter.io/unhealthy",
        "value": "reboot_node",
        "effect": "None",
    }
    status = writer_status(d)
    assert status["unresolved_devices"] == [] and status["resource_slices"]["state"] == "ok"
    assert api.invalid == []


def test_a_killed_worker_creates_no_rule_and_turns_nothing_false(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    """One crash of ours is no evidence about the GPUs: they are unknown until the
    worker is back, and unknown devices are neither tainted nor reported unhealthy."""
    fake = fake_nvml(2)
    api.slices = nvidia_slices([fake.uuid(0), fake.uuid(1)])
    d = daemon_factory(daemon_config(api, pki, tmp_path, taint_effect="NoExecute"), env=fake.env())
    d.wait_for(lambda: (condition(api) or {}).get("status") == "True", timeout=60)
    pid = d.status()["sources"]["nvml"]["worker_pid"]
    # The next worker's bootstrap (its one device count) takes 2 s: the devices are
    # unknown for that long, whatever the speed of the restart itself.
    fake.add_rule("nvmlDeviceGetCount_v2", delay_ms=2000, times=1)
    os.kill(pid, signal.SIGKILL)
    statuses, health = set(), set()
    end = time.monotonic() + 15
    while time.monotonic() < end:  # sampling through the crash and the restart
        statuses.add((condition(api) or {}).get("status"))
        health |= {dev["health"] for dev in d.get("/v1/devices").json()["devices"]}
        assert api.rules == {}
        time.sleep(0.05)
    assert statuses == {"True"}
    # /v1/devices: Unknown while the worker was down, never Unhealthy, Healthy again after.
    assert "Unknown" in health and "Unhealthy" not in health
    d.wait_for(
        lambda: {dev["health"] for dev in d.get("/v1/devices").json()["devices"]} == {"Healthy"},
        timeout=30,
        what="Healthy again",
    )
    assert d.status()["sources"]["nvml"]["worker_pid"] != pid
    assert not [r for r in rule_writes(api)]


def test_a_worker_that_cannot_start_creates_no_rule_and_turns_nothing_false(
    daemon_factory, fake_nvml, api, pki, tmp_path
):
    """A worker whose library no longer initialises (every restart fails its bootstrap)
    is the exporter's trouble: the GPUs are Unknown, nothing is tainted, the condition
    is not turned False, and all is Healthy again once a worker starts."""
    fake = fake_nvml(2)
    api.slices = nvidia_slices([fake.uuid(0), fake.uuid(1)])
    d = daemon_factory(daemon_config(api, pki, tmp_path, taint_effect="NoExecute"), env=fake.env())
    d.wait_for(lambda: (condition(api) or {}).get("status") == "True", timeout=60)
    fake.state.init_error = 999  # NVML_ERROR_UNKNOWN from nvmlInit: no worker bootstraps
    os.kill(d.status()["sources"]["nvml"]["worker_pid"], signal.SIGKILL)
    d.wait_for(
        lambda: {dev["health"] for dev in d.get("/v1/devices").json()["devices"]} == {"Unknown"},
        timeout=30,
        what="Unknown while no worker starts",
    )
    end = time.monotonic() + 8
    while time.monotonic() < end:  # several failed bootstraps
        assert (condition(api) or {}).get("status") != "False" and api.rules == {}
        assert "Unhealthy" not in {dev["health"] for dev in d.get("/v1/devices").json()["devices"]}
        time.sleep(0.1)
    fake.state.init_error = 0
    d.wait_for(
        lambda: {dev["health"] for dev in d.get("/v1/devices").json()["devices"]} == {"Healthy"},
        timeout=60,
        what="Healthy once a worker starts",
    )
    assert not [r for r in rule_writes(api)]
