"""A physical GPU is the unit of isolation: the daemon (subprocess) against the fake amdsmi
(8 MI300X in CPX: 64 partitions) and the fake NVML (MIG instances), with every call on one
physical GPU hanging from the start. Its logical devices are isolated together in one
bootstrap deadline (one worker restart, not one per partition), what the hung bootstrap had
identified is shown while the culprit is found (identity alone: no shipped alert fires on
it), the healthy ones are served meanwhile, and one probe at a time retries the hung GPU."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.e2e.test_device_isolation import Scrapes, amd_config, stop_clean
from tests.e2e.test_nvml_daemon import nvml_config
from tests.fakes.amdsmi import expected
from tests.fakes.amdsmi.state import NUM_XCP, FakeAmdSmi, cpx
from tests.fakes.nvml.control import MigInstance
from tests.helpers.daemon import Daemon, samples, value
from tests.helpers.promtool import alerts_firing

HUNG_GPU = 3
BOOTSTRAP_SECONDS = 6.0
# A poll of 56 partitions, slow fields included, takes over a second on a loaded machine.
DEADLINES = {
    "interval": "2s",
    "slow_interval": "2s",
    "timeout": "5s",
    "bootstrap_timeout": f"{BOOTSTRAP_SECONDS:g}s",
}
# Long enough to look at the first bootstrap while it hangs, on a loaded machine.
CPX_BOOTSTRAP_SECONDS = 15.0
# How long the exposition of a start may last without any shipped alert firing: far
# longer than a start with several hung GPUs in turn (one bootstrap deadline each).
QUIET_START_MINUTES = 9


def most_workers(d: Daemon, seconds: float) -> int:
    """The most worker processes (main worker and probes) seen at once over ``seconds``."""
    most = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        most = max(most, len(d.workers()))
        time.sleep(0.05)
    return most


def mig_series(text: str, device: str) -> int:
    """How many MIG devices /metrics describes on GPU ``device``."""
    return sum(
        1
        for name, labels in samples(text)
        if name == "accel_mig_device_info" and ("device", device) in labels
    )


def isolations(d: Daemon) -> int:
    """How many times the daemon logged a device isolated (each cost one deadline)."""
    events = [json.loads(line) for line in d.lines if line.startswith("{")]
    return sum(1 for e in events if e.get("event") == "device isolated")


def test_a_hung_cpx_gpu_is_isolated_whole_in_one_deadline(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi, tmp_path: Any
) -> None:
    cpx(amdsmi_fake)
    hung = range(HUNG_GPU * NUM_XCP, (HUNG_GPU + 1) * NUM_XCP)
    slots = [amdsmi_fake.rule("*", hang=True, device=i) for i in hung]
    began = time.monotonic()
    config = amd_config()
    config["sources"]["amdsmi"].update(DEADLINES, bootstrap_timeout=f"{CPX_BOOTSTRAP_SECONDS:g}s")
    d = daemon_factory(config=config, env=amdsmi_env)
    s = Scrapes(d)
    healthy = {
        str(i): expected.uuid(amdsmi_fake.device(i)) for i in range(8 * NUM_XCP) if i not in hung
    }
    # While the first bootstrap hangs on GPU 3, the partitions it identified before it
    # (GPUs 0-2) are shown by identity alone: their state is not known yet.
    before = range(HUNG_GPU * NUM_XCP)

    def first_bootstrap_shown() -> bool:
        status = d.status()["sources"]["amdsmi"]
        return status["worker_restarts"] == 0 and status.get("identified_so_far") == len(before)

    d.wait_for(first_bootstrap_shown, CPX_BOOTSTRAP_SECONDS, what="the identified partitions")
    start = s.get()
    got = samples(start)
    assert d.status()["sources"]["amdsmi"]["worker_restarts"] == 0, "isolated already"
    for i in before:
        dev = amdsmi_fake.device(i)
        info = [v for k, v in got if k == "accel_device_info" and ("device", str(i)) in v]
        assert [dict(labels)["uuid"] for labels in info] == [expected.uuid(dev)], i
    assert not any(
        k == "accel_device_info" and ("device", str(i)) in v for k, v in got for i in hung
    )
    # No state claimed (no accel_device_up, no health), no count, no value yet.
    for family in ("accel_device_up", "accel_device_health", "accel_devices", "accel_power_watts"):
        assert not any(k == family for k, _ in got), family
    assert value(got, "accel_exporter_source_down_reason_info", source="amdsmi", reason="starting")
    # Shown, but not a first poll: the source is still pending (and the daemon not ready).
    assert d.status()["sources"]["amdsmi"]["state"] == "pending"
    # Nothing a start shows may fire a shipped alert, even held for many minutes.
    assert alerts_firing(start, QUIET_START_MINUTES, tmp_path) == ""

    def all_healthy_up() -> bool:
        got = samples(s.get())
        return all(
            value(got, "accel_device_up", device=dev, uuid=uuid) == 1
            for dev, uuid in healthy.items()
        )

    d.wait_for(all_healthy_up, 60, what="the 56 healthy partitions up")
    took = time.monotonic() - began
    # One isolation (the whole GPU) and one restart, not one deadline per partition: the
    # old way took eight bootstrap deadlines; this takes one plus a few polls.
    assert d.status()["sources"]["amdsmi"]["worker_restarts"] == 1
    # One deadline waited out, not eight: the old way could not be this quick (the
    # bench measures the time; here a loaded machine only stretches it).
    assert isolations(d) == 1
    assert took < NUM_XCP * CPX_BOOTSTRAP_SECONDS, took
    # From then on the eight partitions stay down, hung, under their index.
    for _ in range(5):
        got = samples(s.get())
        for i in hung:
            sick = {"device": str(i), "uuid": f"unidentified-{i}"}
            assert value(got, "accel_device_up", **sick) == 0, i
            assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
        assert value(got, "accel_devices", vendor="amd") == 64
        time.sleep(0.3)
    entries = d.status()["sources"]["amdsmi"]["isolated_devices"]
    assert sorted(e["index"] for e in entries) == list(hung)
    assert {e["physical_device"] for e in entries} == {"0000:5c:00"}
    # One probe for that GPU at a time (not one per partition): main worker + 1.
    assert most_workers(d, 3 * BOOTSTRAP_SECONDS) <= 2
    for slot in slots:
        amdsmi_fake.clear_rule(slot)
    amdsmi_fake.release_hangs()
    for i in hung:
        dev = {"device": str(i), "uuid": expected.uuid(amdsmi_fake.device(i))}
        s.wait("accel_device_up", 1, timeout=60, **dev)
    assert "unidentified-" not in s.get()
    assert d.status()["sources"]["amdsmi"]["isolated_devices"] == []
    stop_clean(d, s)


def test_a_hung_gpu_with_mig_instances_is_isolated_whole(
    daemon_factory: Any, fake_nvml: Any
) -> None:
    fake = fake_nvml(4)
    for gpu in (1, 2):
        fake.set_mig(
            gpu,
            [
                MigInstance(1, 0, memory_total=20 << 30, memory_used=1 << 30),
                MigInstance(2, 0, memory_total=20 << 30, memory_used=2 << 30),
                MigInstance(3, 0, memory_total=20 << 30, memory_used=3 << 30),
            ],
        )
    fake.add_rule("*", device=1, hang=True)
    began = time.monotonic()
    deadlines = {**DEADLINES, "bootstrap_timeout": f"{CPX_BOOTSTRAP_SECONDS:g}s"}
    d = daemon_factory(nvml_config(**deadlines), env=fake.env())
    s = Scrapes(d)
    # The same for NVML: GPU 0, identified before GPU 1 hung, is shown by identity alone.

    def first_bootstrap_shown() -> bool:
        status = d.status()["sources"]["nvml"]
        return status["worker_restarts"] == 0 and status.get("identified_so_far") == 1

    d.wait_for(first_bootstrap_shown, CPX_BOOTSTRAP_SECONDS, what="GPU 0 identified")
    got = samples(s.get())
    assert d.status()["sources"]["nvml"]["worker_restarts"] == 0, "isolated already"
    info = [dict(v) for k, v in got if k == "accel_device_info"]
    assert [(i["device"], i["uuid"]) for i in info] == [("0", fake.uuid(0))]
    assert not any(k == "accel_device_up" for k, _ in got)
    for i in (0, 2, 3):
        s.wait("accel_device_up", 1, device=str(i), uuid=fake.uuid(i))
    took = time.monotonic() - began
    assert d.status()["sources"]["nvml"]["worker_restarts"] == 1
    # One deadline waited out, not eight: the old way could not be this quick (the
    # bench measures the time; here a loaded machine only stretches it).
    assert isolations(d) == 1
    assert took < NUM_XCP * CPX_BOOTSTRAP_SECONDS, took
    sick = {"device": "1", "uuid": "unidentified-1"}
    s.wait("accel_device_up", 0, **sick)
    got = samples(s.get())
    assert value(got, "accel_device_down_reason_info", reason="hung", **sick) == 1
    # The healthy MIG GPU's instances are read; the hung one's are not (nor guessed).
    d.wait_for(lambda: mig_series(s.get(), "2") == 3, 30, what="GPU 2's MIG instances")
    assert mig_series(s.get(), "1") == 0
    assert most_workers(d, 3 * BOOTSTRAP_SECONDS) <= 2
    stop_clean(d, s)
