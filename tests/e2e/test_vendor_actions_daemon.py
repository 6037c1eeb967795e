"""Each vendor's fatal signal through the real daemon, its worker and the fake native
library, and the action docs/health.md documents for it (Intel Level Zero, Gaudi HLML, TPU)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from exporter.catalog.vocabulary import RECOMMENDED_ACTIONS as ACTIONS
from tests.e2e.test_health_actions_daemon import one_hot, reasons
from tests.e2e.test_intel_daemon import gaudi, intel, start
from tests.e2e.test_tpu_daemon import closed_port
from tests.e2e.test_tpu_daemon import config as tpu_config
from tests.fakes.hlml.control import FakeHlml
from tests.fakes.levelzero.control import FakeZe
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
        scope="device",
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
