"""Reloads lose no signal and blank no series: the daemon (subprocess) against the fake NVML,
with SIGHUPs arriving during reloads, a reload that changes nothing, and one whose new
worker does not come up."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import yaml

from tests.e2e.test_nvml_daemon import nvml_config
from tests.helpers.daemon import Daemon, samples, value

GPUS = 4


def write(d: Daemon, config: dict[str, Any]) -> None:
    d.config_file.write_text(yaml.safe_dump(config))


def count(d: Daemon, event: str) -> int:
    return sum(e.get("event") == event for e in d.events)


class Scraper(threading.Thread):
    """Scrapes /metrics back to back: every status and which GPUs had accel_device_up."""

    def __init__(self, d: Daemon, uuids: list[str]) -> None:
        super().__init__(daemon=True)
        self.d, self.uuids = d, uuids
        self.done = threading.Event()
        self.statuses: list[int] = []
        self.missing: list[list[str]] = []  # per scrape, the GPUs without accel_device_up

    def run(self) -> None:
        while not self.done.is_set():
            reply = self.d.get("/metrics")
            self.statuses.append(reply.status)
            got = samples(reply.text) if reply.status == 200 else {}
            self.missing.append(
                [
                    u
                    for i, u in enumerate(self.uuids)
                    if value(got, "accel_device_up", device=str(i), uuid=u) is None
                ]
            )

    def stop(self) -> None:
        self.done.set()
        self.join(10)


def test_sighups_during_reloads_apply_the_last_file_and_blank_nothing(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(GPUS)
    uuids = [fake.uuid(i) for i in range(GPUS)]
    # Two files that change the source's settings (each reload replaces its worker).
    files = [nvml_config(), nvml_config(interval="2s", slow_interval="2s")]
    d = daemon_factory(files[0], env=fake.env())
    d.wait_metric("accel_device_up", 1, device=str(GPUS - 1), uuid=uuids[-1])
    scraper = Scraper(d, uuids)
    scraper.start()
    try:
        for k in range(30):  # 3 s of SIGHUPs, 100 ms apart, alternating the files
            write(d, files[k % 2])
            d.signal(signal.SIGHUP)
            time.sleep(0.1)
        last = nvml_config(interval="3s", slow_interval="3s")
        write(d, last)
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: d.status()["sources"]["nvml"]["interval"] == 3.0, 30, what="the last file"
        )
        for i, u in enumerate(uuids):
            d.wait_metric("accel_device_up", 1, timeout=30, device=str(i), uuid=u)
    finally:
        scraper.stop()
    assert len(scraper.statuses) > 20 and set(scraper.statuses) == {200}
    assert not any(scraper.missing), [m for m in scraper.missing if m][:3]
    # Reloads ran during reloads (coalesced, so fewer than the signals), none was lost.
    assert count(d, "reloading again") >= 1
    assert 2 <= count(d, "config reloaded") <= 31
    # No worker left behind: one for the one device source.
    d.wait_for(lambda: len(d.workers()) == 1, 10, what="one worker")
    code, _ = d.stop()
    assert code == 0
    assert d.leftover_children() == set()


def test_a_reload_that_changes_nothing_restarts_nothing(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(2)
    d = daemon_factory(nvml_config(), env=fake.env())
    d.wait_metric("accel_device_up", 1, device="1", uuid=fake.uuid(1))
    before = d.status()["sources"]["nvml"]
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: count(d, "config reloaded") == 1, 30, what="the reload")
    after = d.status()["sources"]["nvml"]
    assert after["worker_pid"] == before["worker_pid"]
    assert after["worker_restarts"] == before["worker_restarts"]
    assert after["polls"] >= before["polls"]  # the same source, its count going on
    d.stop()


def test_a_reload_keeps_the_devices_down_reloading_until_the_new_worker_answers(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(2)
    d = daemon_factory(nvml_config(bootstrap_timeout="30s"), env=fake.env())
    uuids = [fake.uuid(i) for i in range(2)]
    d.wait_metric("accel_power_watts", device="1", uuid=uuids[1])
    # The new worker hangs starting (a system call of its bootstrap).
    rule = fake.add_rule("nvmlSystemGetDriverVersion", device=-2, hang=True)
    write(d, nvml_config(bootstrap_timeout="30s", slow_interval="2s"))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: count(d, "config reloaded") == 1, 30, what="the reload")
    time.sleep(4)  # past stale_after (3 intervals): identity and state must still be there
    got = samples(d.metrics())
    for i, u in enumerate(uuids):
        dev = {"device": str(i), "uuid": u}
        assert value(got, "accel_device_up", **dev) == 0
        assert value(got, "accel_device_down_reason_info", reason="reloading", **dev) == 1
        assert value(got, "accel_power_watts", **dev) is None  # no stale values
    fake.release(rule)
    d.wait_metric("accel_device_up", 1, timeout=30, device="1", uuid=uuids[1])
    d.stop()
