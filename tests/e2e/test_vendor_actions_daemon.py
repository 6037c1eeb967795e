"""Each vendor's fatal signal through the real daemon, its worker and the fake native
library, and the action docs/health.md documents for it (Intel Level Zero, Gaudi HLML, TPU;
AWS Neuron through the fake neuron-monitor executable and a fake sysfs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from exporter.catalog.vocabulary import RECOMMENDED_ACTIONS as ACTIONS
from tests.e2e.test_health_actions_daemon import one_hot, reasons
from tests.e2e.test_health_api import devices
from tests.e2e.test_intel_daemon import gaudi, intel, start
from tests.e2e.test_neuron_daemon import config as neuron_config
from tests.e2e.test_tpu_daemon import closed_port
from tests.e2e.test_tpu_daemon import config as tpu_config
from tests.fakes.hlml.control import FakeHlml
from tests.fakes.levelzero.control import FakeZe
from tests.fakes.neuron.control import FakeMonitor, serial
from tests.fakes.neuron.control import make_host as neuron_host
from tests.fakes.tpu.control import bdf, make_host
from tests.fakes.tpu.control import uuid as tpu_uuid
from tests.helpers.daemon import samples, value

STATES = ("ok", "degraded", "failed", "predicted_failure")


def test_intel_and_gaudi_fatal_signals_get_their_documented_actions(
    daemon_factory: Any, ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> None:
    d = start(daemon_factory, ze_lib, ze_fake, hlml_lib, hlml_fake)
    # Intel GPU 0: memory to be replaced (zes_mem_health_t REPLACE); GPU 1: wedged
    # (ZES_RESET_REASON_FLAG_WEDGED); GPU 2: a reset completes repairs (REPAIR).
    ze_fake.device(0).mem_health = 4
    ze_fake.device(1).reset_flags = 1
    ze_fake.device(2).reset_flags = 2
    d.wait_metric("accel_device_recommended_action", 1, action="replace_device", **intel(0))
    d.wait_metric("accel_device_recommended_action", 1, action="reset_device", **intel(2))
    d.wait_metric("accel_device_recommended_action", 1, action="reset_device", **intel(1))
    got = samples(d.metrics())
    assert one_hot(got, "accel_device_health", STATES, **intel(0)) == "failed"
    assert reasons(got, intel(0)["uuid"]) == {"memory_replace": "replace_device"}
    assert one_hot(got, "accel_device_health", STATES, **intel(1)) == "failed"
    assert reasons(got, intel(1)["uuid"]) == {"reset_wedged": "reset_device"}
    wedged = value(
        got,
        "accel_device_action_reason_info",
        reason="reset_wedged",
        action="reset_device",
        scope="partition",
        escalation="reboot_node",
        escalation_scope="",
        provenance="vendor_catalog",
        **intel(1),
    )
    assert wedged == 1
    assert value(got, "accel_intel_reset_reason_info", reason="wedged", **intel(1)) == 1
    assert one_hot(got, "accel_device_health", STATES, **intel(2)) == "degraded"
    assert reasons(got, intel(2)["uuid"]) == {"reset_repair": "reset_device"}
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **intel(3)) == "none"
    assert reasons(got, intel(3)["uuid"]) == {}
    # Gaudi 3 starts with replaced rows pending a reset (the fake's population).
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **gaudi(3)) == "reset_device"
    assert reasons(got, gaudi(3)["uuid"]) == {"row_replacement_pending": "reset_device"}
    assert one_hot(got, "accel_device_health", STATES, **gaudi(3)) == "degraded"
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **gaudi(0)) == "none"
    # Intel GPU 3: its uncorrectable compute errors grow (zes_ras_error_cat_t COMPUTE).
    ze_fake.device(3).ras[1][3] += 1
    d.wait_metric("accel_device_recommended_action", 1, action="reset_device", **intel(3))
    got = samples(d.metrics())
    assert reasons(got, intel(3)["uuid"]) == {"ras_compute": "reset_device"}
    assert one_hot(got, "accel_device_health", STATES, **intel(3)) == "failed"
    # Repaired: the memory healthy again, the reset done: nothing asked any more.
    ze_fake.device(0).mem_health = 1
    ze_fake.device(1).reset_flags = 0
    d.wait_metric("accel_device_recommended_action", 1, action="none", **intel(0))
    d.wait_metric("accel_device_recommended_action", 1, action="none", **intel(1))


def test_a_tpu_chip_gone_from_the_host_asks_a_reboot_of_the_node(
    daemon_factory: Any, tmp_path: Path
) -> None:
    host = make_host(tmp_path / "host", 4)
    d = daemon_factory(tpu_config(host, [closed_port()]))
    d.wait_metric("accel_devices", 4, vendor="google")
    gone = {"device": "2", "uuid": tpu_uuid(2)}
    d.wait_metric("accel_device_recommended_action", 1, action="none", **gone)
    shutil.rmtree(host / "sys" / "bus" / "pci" / "devices" / bdf(2))
    d.wait_metric("accel_device_recommended_action", 1, action="reboot_node", **gone)
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", reason="device_missing", **gone) == 1
    assert reasons(got, gone["uuid"]) == {"device_down": "reboot_node"}
    # The node is the scope: every chip of it is named.
    reach = {
        dict(labels)["affected_uuid"]
        for (name, labels), v in got.items()
        if name == "accel_device_action_scope_info" and ("uuid", gone["uuid"]) in labels
    }
    assert reach == {tpu_uuid(c) for c in range(4)}


def neuron(i: int) -> dict[str, str]:
    return {"device": str(i), "uuid": serial(i)}


def neuron_devices(d: Any) -> dict[str, dict[str, Any]]:
    """/v1/devices' Neuron devices by uuid (the document checked against its schema)."""
    return {dev["uuid"]: dev for dev in devices(d)["devices"] if dev["source"] == "neuron"}


def test_a_neuron_uncorrectable_error_asks_to_replace_the_instance_and_a_dead_monitor_is_unknown(
    daemon_factory: Any, tmp_path: Path
) -> None:
    host = neuron_host(tmp_path / "host", 3)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    # Corrected errors on device 0 and the node-wide hardware execution errors from the
    # start: counted, nobody failed.
    runtime = {"tag": "train", "util": {"0": 10.0}, "errors": {"hardware": 2}}
    corrected = {"neuron_device_index": 0, "mem_ecc_corrected": 5, "sram_ecc_corrected": 1}
    monitor.set(devices=3, cores_per_device=2, runtimes=[runtime], ecc=[corrected])
    state_dir = tmp_path / "state"
    cfg = {**neuron_config(host, command=monitor.command), "health": {"state_dir": str(state_dir)}}
    d = daemon_factory(cfg)
    d.wait_for(lambda: monitor.printed >= 2, what="two reports", timeout=30)

    def counted() -> bool:
        got = samples(d.metrics())
        hardware = value(got, "accel_neuron_execution_errors_total", error="hardware") or 0
        fixed = value(got, "accel_ecc_errors_total", **neuron(0), type="corrected", counter="")
        return hardware >= 4 and (fixed or 0) >= 12

    d.wait_for(counted, what="the hardware and corrected errors of two reports", timeout=30)
    got = samples(d.metrics())
    for i in range(3):
        assert one_hot(got, "accel_device_health", STATES, **neuron(i)) == "ok"
        assert one_hot(got, "accel_device_recommended_action", ACTIONS, **neuron(i)) == "none"
    # Device 1's HBM reports an uncorrectable error (neuron_hw_counters mem_ecc_uncorrected).
    monitor.set(ecc=[corrected, {"neuron_device_index": 1, "mem_ecc_uncorrected": 1}])
    d.wait_metric("accel_device_recommended_action", 1, action="replace_device", **neuron(1))
    monitor.set(ecc=[corrected])
    got = samples(d.metrics())
    assert one_hot(got, "accel_device_health", STATES, **neuron(1)) == "failed"
    assert reasons(got, serial(1)) == {"hbm_uncorrectable": "replace_device"}
    row = {
        "reason": "hbm_uncorrectable",
        "action": "replace_device",
        "scope": "node",
        "escalation": "contact_vendor",
        "escalation_scope": "",  # as far as the scope: the node
        "provenance": "vendor_catalog",
    }
    assert value(got, "accel_device_action_reason_info", **row, **neuron(1)) == 1
    assert value(got, "accel_neuron_ecc_uncorrected_errors_total", **neuron(1), memory="hbm") >= 1
    # The instance is replaced with every device on it: the node is the scope.
    reach = {
        dict(labels)["affected_uuid"]
        for (name, labels), v in got.items()
        if name == "accel_device_action_scope_info" and ("uuid", serial(1)) in labels
    }
    assert reach == {serial(i) for i in range(3)}
    # Only device 1 asks for it: the others are ok, asking nothing.
    for i in (0, 2):
        assert one_hot(got, "accel_device_health", STATES, **neuron(i)) == "ok"
        assert one_hot(got, "accel_device_recommended_action", ACTIONS, **neuron(i)) == "none"
        assert reasons(got, serial(i)) == {}
    api = neuron_devices(d)
    assert (api[serial(1)]["verdict"], api[serial(1)]["health"]) == ("failed", "Unhealthy")
    assert api[serial(1)]["recommended_action"] == "replace_device"
    (found,) = [r for r in api[serial(1)]["reasons"] if r["action"] not in (None, "none")]
    assert (found["reason"], found["action"], found["scope"], found["escalation"]) == (
        "hbm_uncorrectable",
        "replace_device",
        "node",
        "contact_vendor",
    )
    assert found["provenance"] == "vendor_catalog" and "nrt-troubleshoot" in found["reference"]
    assert "stop then start" in found["detail"]
    assert (api[serial(0)]["verdict"], api[serial(0)]["health"]) == ("ok", "Healthy")

    # neuron-monitor killed, and failing each time it is started again: the devices are
    # unknown (evidence about the monitor, not the devices), device 1's finding remembered.
    monitor.set(exit_after=0)
    os.kill(d.status()["sources"]["neuron"]["monitor"]["pid"], signal.SIGKILL)
    d.wait_metric("accel_device_up", 0, **neuron(0), timeout=30)
    d.wait_for(
        lambda: all(dev["health"] == "Unknown" for dev in neuron_devices(d).values()),
        what="every Neuron device unknown",
        timeout=30,
    )
    got = samples(d.metrics())
    for i in range(3):
        for state in STATES:  # unknown: none of the states holds
            assert value(got, "accel_device_health", **neuron(i), state=state) == 0
    api = neuron_devices(d)
    assert all(dev["health"] == "Unknown" for dev in api.values())
    assert "neuron-monitor down: " in api[serial(0)]["message"], api[serial(0)]["message"]
    assert api[serial(1)]["recommended_action"] == "replace_device"
    assert value(got, "accel_device_health", **neuron(1), state="failed") == 0

    # The memory survives a daemon restart (health.state_dir): device 1 still asks.
    path = state_dir / "health-neuron.json"
    d.wait_for(lambda: serial(1) in json.loads(path.read_text())["devices"], what="the file")
    assert d.status()["sources"]["neuron"]["health_state"] == f"persisted to {path}"
    assert d.stop()[0] == 0
    monitor.drop("exit_after")
    second = daemon_factory(cfg)
    second.wait_metric(
        "accel_device_recommended_action", 1, action="replace_device", timeout=30, **neuron(1)
    )
    second.wait_metric("accel_device_health", 1, state="failed", timeout=30, **neuron(1))
    got = samples(second.metrics())
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **neuron(0)) == "none"


def test_a_neuron_device_gone_from_sysfs_asks_a_reboot_of_the_node(
    daemon_factory: Any, tmp_path: Path
) -> None:
    host = neuron_host(tmp_path / "host", 2)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    monitor.set(devices=2, cores_per_device=2)
    d = daemon_factory(neuron_config(host, command=monitor.command))
    d.wait_metric("accel_device_recommended_action", 1, action="none", **neuron(1))
    shutil.rmtree(host / "sys" / "devices" / "virtual" / "neuron_device" / "neuron1")
    d.wait_metric("accel_device_recommended_action", 1, action="reboot_node", **neuron(1))
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", reason="device_missing", **neuron(1)) == 1
    assert reasons(got, serial(1)) == {"device_down": "reboot_node"}
    assert one_hot(got, "accel_device_health", STATES, **neuron(1)) == "failed"
    assert one_hot(got, "accel_device_health", STATES, **neuron(0)) == "ok"
    assert value(got, "accel_devices", vendor="aws") == 1
