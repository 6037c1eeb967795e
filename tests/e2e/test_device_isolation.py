"""One sick device never blinds the node: the daemon (subprocess) against the fake NVML and
amdsmi libraries, with calls on one device hanging from the start or after a healthy start,
a worker SIGKILLed mid-poll, and one stuck in uninterruptible sleep (a frozen cgroup)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_amdsmi_daemon import CONFIG as AMD_CONFIG
from tests.e2e.test_amdsmi_daemon import ident
from tests.e2e.test_nvml_daemon import nvml_config
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.fakes.nvml.control import CRASH
from tests.helpers.daemon import Daemon, samples, value

FREEZER = Path("/sys/fs/cgroup/freezer")
# Short deadlines so a hang is caught in seconds; the bootstrap's is the one a hang
# during enumeration has to wait out.
NVML = {"timeout": "2s", "bootstrap_timeout": "4s"}


class Scrapes:
    """Every /metrics of a test, timed: none may take a second while a device hangs."""

    def __init__(self, d: Daemon) -> None:
        self.d = d
        self.slowest = 0.0
        self.count = 0

    def get(self) -> str:
        began = time.monotonic()
        text = self.d.metrics()
        self.slowest = max(self.slowest, time.monotonic() - began)
        self.count += 1
        return text

    def wait(self, name: str, expected: float, timeout: float = 30.0, **labels: str) -> None:
        def check() -> bool:
            return value(self.get(), name, **labels) == expected

        self.d.wait_for(check, timeout, what=f"{name}{labels} == {expected}")


def fresh(scrapes: Scrapes, set_power: Any, devices: dict[str, str], watts: float) -> None:
    """Give each device a new power value and wait until /metrics shows it."""
    for device in devices:
        set_power(int(device), watts)
    for device, uuid in devices.items():
        scrapes.wait("accel_power_watts", watts, timeout=15, device=device, uuid=uuid)


def isolated(d: Daemon, source: str, device: str) -> dict[str, Any]:
    entries = d.status()["sources"][source]["isolated_devices"]
    found = [e for e in entries if e.get("device") == device]
    assert found, entries
    return found[0]


def stop_clean(d: Daemon, scrapes: Scrapes | None = None) -> None:
    """SIGTERM: exit 0, no process left behind; no scrape was ever slow."""
    if scrapes is not None:
        assert scrapes.slowest < 1.0, f"a scrape took {scrapes.slowest:.2f}s"
    code, _ = d.stop()
    assert code == 0
    assert d.leftover_children() == set()


def healthy_nvml(daemon_factory: Any, fake_nvml: Any) -> tuple[Any, Daemon, Scrapes, list[str]]:
    """A 4-GPU node, every GPU up: the fake, the daemon, its timed scrapes, the uuids."""
    fake = fake_nvml(4)
    d = daemon_factory(nvml_config(**NVML), env=fake.env())
    s = Scrapes(d)
    u = [fake.uuid(i) for i in range(4)]
    s.wait("accel_device_up", 1, device="3", uuid=u[3])
    return fake, d, s, u


# -- NVIDIA ------------------------------------------------------------------------


def nvml_power(fake: Any) -> Any:
    def set_power(i: int, watts: float) -> None:
        fake.device(i).power_mw = int(watts * 1000)

    return set_power


def test_every_call_on_one_gpu_hangs_from_the_start(daemon_factory: Any, fake_nvml: Any) -> None:
    fake = fake_nvml(4)
    rule = fake.add_rule("*", device=1, hang=True)  # enumeration included
    d = daemon_factory(nvml_config(**NVML), env=fake.env())
    s = Scrapes(d)
    healthy = {str(i): fake.uuid(i) for i in (0, 2, 3)}
    for device, uuid in healthy.items():
        s.wait("accel_device_up", 1, device=device, uuid=uuid)
    # Never identified: its index is its name, and the reason says why.
    sick = {"device": "1", "uuid": "unidentified-1"}
    s.wait("accel_device_up", 0, **sick)
    got = samples(s.get())
    assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
    call = "nvmlDeviceGetHandleByIndex"
    assert value(got, "accel_device_isolated_info", reason="hung", call=call, **sick) == 1
    assert value(got, "accel_devices", vendor="nvidia") == 4
    entry = isolated(d, "nvml", "1")
    assert entry["call"] == call and entry["reason"] == "hung" and entry["since"] <= time.time()
    fresh(s, nvml_power(fake), healthy, 201.5)
    time.sleep(3)  # the hang goes on (probes included): the others stay fresh
    fresh(s, nvml_power(fake), healthy, 202.5)
    assert value(s.get(), "accel_device_up", **sick) == 0
    fake.release(rule)
    s.wait("accel_device_up", 1, timeout=60, device="1", uuid=fake.uuid(1))
    text = s.get()
    assert "unidentified-1" not in text  # rejoined under its own name: no duplicate series
    assert value(text, "accel_devices", vendor="nvidia") == 4
    assert d.status()["sources"]["nvml"]["isolated_devices"] == []
    stop_clean(d, s)


def test_one_call_hangs_after_a_healthy_start(daemon_factory: Any, fake_nvml: Any) -> None:
    fake, d, s, u = healthy_nvml(daemon_factory, fake_nvml)
    restarts_before = d.status()["sources"]["nvml"]["worker_restarts"]
    rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=1, hang=True)
    s.wait("accel_device_up", 0, device="1", uuid=u[1])
    got = samples(s.get())
    sick = {"device": "1", "uuid": u[1]}
    assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
    assert (
        value(
            got, "accel_device_isolated_info", reason="hung", call="nvmlDeviceGetPowerUsage", **sick
        )
        == 1
    )
    since = value(got, "accel_device_isolated_since_timestamp_seconds", **sick)
    assert since is not None and since <= time.time()
    # Its identity is the one it had: the same info series, model and bus id included.
    assert value(got, "accel_device_info", vendor="nvidia", **sick, model="NVIDIA H100 80GB HBM3",
                 pci_bus_id="00000000:24:00.0", serial="1654922001001", vbios="96.00.99.00.02",
                 driver_version="580.82.07", cuda_driver_version="12.8", mig_mode="disabled",
                 compute_partition="", memory_partition="", partition="",
                 physical_gpu="") == 1  # fmt: skip
    entry = isolated(d, "nvml", "1")
    assert entry["call"] == "nvmlDeviceGetPowerUsage" and entry["uuid"] == u[1]
    healthy = {str(i): u[i] for i in (0, 2, 3)}
    fresh(s, nvml_power(fake), healthy, 211.5)
    time.sleep(3)
    fresh(s, nvml_power(fake), healthy, 212.5)
    got = samples(s.get())
    assert value(got, "accel_power_watts", **sick) is None  # never a stale number
    # Failed on its isolation (the culprit), the others judged ok from their fresh data.
    assert value(got, "accel_device_health", state="failed", **sick) == 1
    assert value(got, "accel_device_health_reason_info", reason="isolated", **sick) == 1
    assert value(got, "accel_device_health_reason_info", reason="device_down", **sick) is None
    assert value(got, "accel_device_recommended_action", action="reset_device", **sick) == 1
    for device, uuid in healthy.items():
        assert value(got, "accel_device_health", state="ok", device=device, uuid=uuid) == 1
    listed = {e["uuid"]: e for e in json.loads(d.get("/v1/devices").body)["devices"]}
    assert (listed[u[1]]["health"], listed[u[1]]["verdict"]) == ("Unhealthy", "failed")
    assert {listed[uuid]["health"] for uuid in healthy.values()} == {"Healthy"}
    # The metric and /status count the same restarts (both read the store's count).
    assert d.status()["sources"]["nvml"]["worker_restarts"] > restarts_before
    d.wait_for(
        lambda: (
            value(d.metrics(), "accel_exporter_worker_restarts_total", source="nvml")
            == d.status()["sources"]["nvml"]["worker_restarts"]
        ),
        10,
        what="the same restart count on /metrics and /status",
    )
    assert len(d.workers()) <= 2  # the worker, and at times one probe
    fake.release(rule)
    fake.device(1).power_mw = 213_500
    s.wait("accel_power_watts", 213.5, timeout=60, **sick)
    s.wait("accel_device_up", 1, **sick)
    assert value(s.get(), "accel_device_isolated_info", reason="hung",
                 call="nvmlDeviceGetPowerUsage", **sick) is None  # fmt: skip
    stop_clean(d, s)


def test_a_reload_keeps_the_hung_gpu_isolated(daemon_factory: Any, fake_nvml: Any) -> None:
    """SIGHUP must not hand the hung GPU back to a new worker (only to hang on it again)."""
    fake, d, s, u = healthy_nvml(daemon_factory, fake_nvml)
    rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=1, hang=True)
    sick = {"device": "1", "uuid": u[1]}
    s.wait("accel_device_up", 0, **sick)
    since = isolated(d, "nvml", "1")["since"]

    def count(event: str) -> int:
        return sum(e.get("event") == event for e in d.events)

    isolations = count("device isolated")
    # A setting of the source changes (not of its worker): a new runner, which carries
    # the isolation over. (A reload that changes nothing leaves the source running.)
    d.config_file.write_text(yaml.safe_dump(nvml_config(**NVML, slow_interval="2s")))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: count("config reloaded") == 1, 30, what="the reload")
    assert count("isolation carried over") == 1
    healthy = {str(i): u[i] for i in (0, 2, 3)}
    fresh(s, nvml_power(fake), healthy, 221.5)
    time.sleep(3)  # several polls of the new worker: none touches GPU 1
    fresh(s, nvml_power(fake), healthy, 222.5)
    got = samples(s.get())
    assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
    entry = isolated(d, "nvml", "1")
    assert (entry["call"], entry["since"]) == ("nvmlDeviceGetPowerUsage", since)
    assert count("device isolated") == isolations  # never caught hanging again
    # The new runner probes it: released, it comes back.
    fake.release(rule)
    fake.device(1).power_mw = 223_500
    s.wait("accel_power_watts", 223.5, timeout=60, **sick)
    stop_clean(d, s)


def test_worker_sigkilled_mid_poll(daemon_factory: Any, fake_nvml: Any) -> None:
    """An outside SIGKILL is nobody's device fault: every device back after one restart."""
    fake, d, s, uuids = healthy_nvml(daemon_factory, fake_nvml)
    u = {str(i): uuid for i, uuid in enumerate(uuids)}
    rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=2, hang=True)
    d.wait_for(lambda: fake.hangs_entered >= 1, 20, what="a poll inside the hung call")
    (worker,) = d.workers()
    os.kill(worker, signal.SIGKILL)
    fake.release(rule)
    fresh(s, nvml_power(fake), u, 221.5)
    for device, uuid in u.items():
        s.wait("accel_device_up", 1, device=device, uuid=uuid)
    assert d.status()["sources"]["nvml"]["isolated_devices"] == []
    assert worker not in d.workers()
    stop_clean(d)


def test_last_state_stays_while_a_replacement_worker_starts(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    """A worker that died is replaced by one slow to start: the devices stay shown, down."""
    fake = fake_nvml(2)
    d = daemon_factory(nvml_config(**{**NVML, "bootstrap_timeout": "30s"}), env=fake.env())
    u = [fake.uuid(i) for i in range(2)]
    d.wait_metric("accel_device_up", 1, device="1", uuid=u[1])
    rule = fake.add_rule("nvmlDeviceGetCount_v2", device=-2, hang=True)  # the next start hangs
    (worker,) = d.workers()
    os.kill(worker, signal.SIGKILL)
    for i in range(2):
        d.wait_metric("accel_device_up", 0, device=str(i), uuid=u[i])
    d.wait_for(lambda: fake.hangs_entered >= 1, 20, what="the new worker stuck starting")
    time.sleep(5)  # past stale_after (3 intervals): what the last poll said is still shown
    got = samples(d.metrics())
    for i in range(2):
        me = {"device": str(i), "uuid": u[i]}
        assert value(got, "accel_device_up", **me) == 0
        assert value(got, "accel_device_down_reason_info", reason="crashed", **me) == 1
        assert value(got, "accel_power_watts", **me) is None
    assert value(got, "accel_devices", vendor="nvidia") == 2
    assert value(got, "accel_exporter_source_up", source="nvml") == 0
    assert d.status()["sources"]["nvml"]["worker_state"] == "starting"
    fake.release(rule)
    for i in range(2):
        d.wait_metric("accel_device_up", 1, device=str(i), uuid=u[i])
    stop_clean(d)


@pytest.fixture
def freezer() -> Iterator[Path]:
    """A cgroup-v1 freezer group: a frozen process ignores SIGKILL until thawed (D state)."""
    if os.geteuid() != 0 or (not (FREEZER / "freezer.state").exists() and not FREEZER.is_dir()):
        pytest.skip("needs root and the cgroup-v1 freezer to make a process unkillable")
    group = FREEZER / f"accel-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a freezer cgroup: {exc}")
    try:
        yield group
    finally:
        (group / "freezer.state").write_text("THAWED")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_worker_stuck_in_the_driver_never_blocks_the_others(
    daemon_factory: Any, fake_nvml: Any, freezer: Path
) -> None:
    fake, d, s, u = healthy_nvml(daemon_factory, fake_nvml)
    rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=1, hang=True)
    d.wait_for(lambda: fake.hangs_entered >= 1, 20, what="a poll inside the hung call")
    (stuck,) = d.workers()
    (freezer / "cgroup.procs").write_text(str(stuck))
    (freezer / "freezer.state").write_text("FROZEN")
    sick = {"device": "1", "uuid": u[1]}
    s.wait("accel_device_up", 0, **sick)
    assert value(s.get(), "accel_device_down_reason_info", reason="hung", **sick) == 1
    s.wait("accel_exporter_worker_stuck_processes", 1, source="nvml")
    assert isolated(d, "nvml", "1")["stuck_pid"] == stuck
    assert Path(f"/proc/{stuck}").exists()  # killed, yet alive: stuck
    healthy = {str(i): u[i] for i in (0, 2, 3)}
    fresh(s, nvml_power(fake), healthy, 231.5)
    time.sleep(3)  # probes wait while the stuck one lives: never more than one per device
    fresh(s, nvml_power(fake), healthy, 232.5)
    assert d.status()["sources"]["nvml"]["worker_stuck_processes"] == 1
    (freezer / "freezer.state").write_text("THAWED")
    s.wait("accel_exporter_worker_stuck_processes", 0, source="nvml")
    fake.release(rule)
    s.wait("accel_device_up", 1, timeout=60, **sick)
    stop_clean(d, s)


# -- AMD -----------------------------------------------------------------------------


def amd_config() -> dict[str, Any]:
    amd = {**AMD_CONFIG["sources"]["amdsmi"], "timeout": "2s", "bootstrap_timeout": "4s"}
    return {"sources": {**AMD_CONFIG["sources"], "amdsmi": amd}}


def amd_power(fake: FakeAmdSmi) -> Any:
    def set_power(i: int, watts: float) -> None:
        fake.device(i).socket_power = int(watts)

    return set_power


def test_amd_every_call_on_one_gpu_hangs_from_the_start(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    slot = amdsmi_fake.rule("*", hang=True, device=2)
    d = daemon_factory(config=amd_config(), env=amdsmi_env)
    s = Scrapes(d)
    healthy = {str(i): ident(amdsmi_fake, i)["uuid"] for i in range(8) if i != 2}
    for device, uuid in healthy.items():
        s.wait("accel_device_up", 1, device=device, uuid=uuid)
    sick = {"device": "2", "uuid": "unidentified-2"}
    s.wait("accel_device_up", 0, **sick)
    got = samples(s.get())
    assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
    assert value(got, "accel_devices", vendor="amd") == 8
    entry = isolated(d, "amdsmi", "2")
    assert entry["call"].startswith("amdsmi_"), entry
    fresh(s, amd_power(amdsmi_fake), healthy, 301)
    amdsmi_fake.clear_rule(slot)
    amdsmi_fake.release_hangs()
    s.wait("accel_device_up", 1, timeout=60, **ident(amdsmi_fake, 2))
    assert "unidentified-2" not in s.get()
    stop_clean(d, s)


def test_amd_one_call_hangs_after_a_healthy_start(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    d = daemon_factory(config=amd_config(), env=amdsmi_env)
    s = Scrapes(d)
    s.wait("accel_device_up", 1, **ident(amdsmi_fake, 7))
    slot = amdsmi_fake.rule("amdsmi_get_gpu_activity", hang=True, device=2)
    sick = ident(amdsmi_fake, 2)
    s.wait("accel_device_up", 0, **sick)
    got = samples(s.get())
    assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
    assert (
        value(
            got, "accel_device_isolated_info", reason="hung", call="amdsmi_get_gpu_activity", **sick
        )
        == 1
    )
    healthy = {str(i): ident(amdsmi_fake, i)["uuid"] for i in range(8) if i != 2}
    fresh(s, amd_power(amdsmi_fake), healthy, 311)
    time.sleep(3)
    fresh(s, amd_power(amdsmi_fake), healthy, 312)
    amdsmi_fake.clear_rule(slot)
    amdsmi_fake.release_hangs()
    s.wait("accel_device_up", 1, timeout=60, **sick)
    stop_clean(d, s)


def test_a_call_that_crashes_the_library_costs_its_gpu_only(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake, d, s, u = healthy_nvml(daemon_factory, fake_nvml)
    rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=2, error=CRASH)
    sick = {"device": "2", "uuid": u[2]}
    s.wait("accel_device_up", 0, **sick)
    got = samples(s.get())
    assert value(got, "accel_device_down_reason_info", reason="crashed", **sick) == 1
    assert (
        value(got, "accel_device_isolated_info", reason="crashed", call="nvmlDeviceGetPowerUsage",
              **sick) == 1
    )  # fmt: skip
    healthy = {str(i): u[i] for i in (0, 1, 3)}
    fresh(s, nvml_power(fake), healthy, 241.5)
    time.sleep(3)  # its probes crash too, apart: the others stay fresh
    fresh(s, nvml_power(fake), healthy, 242.5)
    fake.clear_rule(rule)
    s.wait("accel_device_up", 1, timeout=60, **sick)
    stop_clean(d)
