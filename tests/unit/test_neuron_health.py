"""AWS Neuron's signals through the shared health judge: the rows, the judge applying them,
and neuron-monitor's report giving the uncorrectable counts by memory."""

from __future__ import annotations

import json

import pytest

from exporter import health_rules
from exporter.health import HealthJudge
from exporter.host.neuron_report import parse
from exporter.model import Reading
from exporter.verdict import DeviceHealth

NOW = 1_700_000_000.0
FAMILY = "accel_neuron_ecc_uncorrected_errors_total"
DEVICES = [("0", "neuron-a"), ("1", "neuron-b"), ("2", "neuron-c")]


def judge() -> HealthJudge:
    return HealthJudge(wall=lambda: NOW, boot_time=lambda: 0.0, source="neuron")


def poll(
    counts: dict[tuple[int, str], float],
    *,
    corrected: float = 0.0,
    hardware: float = 0.0,
    down: dict[int, str] | None = None,
) -> list[Reading]:
    """What the Neuron source hands the judge: identity, ECC totals, node-wide counts."""
    out = [Reading("accel_neuron_execution_errors_total", ("hardware",), hardware)]
    for i, ident in enumerate(DEVICES):
        why = (down or {}).get(i, "")
        out.append(Reading("accel_device_up", ident, 0.0 if why else 1.0))
        if why:
            out.append(Reading("accel_device_down_reason_info", (*ident, why), 1.0))
        out.append(Reading("accel_ecc_errors_total", (*ident, "corrected", ""), corrected))
        total = 0.0
        for memory in ("hbm", "sram"):
            value = counts.get((i, memory), 0.0)
            total += value
            out.append(Reading(FAMILY, (*ident, memory), value))
        out.append(Reading("accel_ecc_errors_total", (*ident, "uncorrected", ""), total))
    return out


def by_uuid(records: tuple[DeviceHealth, ...]) -> dict[str, DeviceHealth]:
    return {r.uuid: r for r in records}


@pytest.mark.parametrize(
    ("memory", "reason"), [("hbm", "hbm_uncorrectable"), ("sram", "sram_uncorrectable")]
)
def test_an_uncorrectable_growth_asks_to_replace_the_instance_on_that_device_only(memory, reason):
    j = judge()
    j.judge(poll({}))
    got = by_uuid(j.judge(poll({(1, memory): 1.0})))
    bad = got["neuron-b"]
    assert (bad.state, bad.action, bad.scope, bad.escalation) == (
        "failed",
        "replace_device",
        "node",
        "contact_vendor",
    )
    (finding,) = [f for f in bad.findings if f.action != "none"]
    assert finding.reason == reason
    assert finding.provenance == "vendor_catalog"
    assert finding.reference == health_rules.NEURON_HW_ERRORS
    assert "stop then start" in finding.detail
    # The instance carries every device: all of them are named as its reach.
    assert bad.scope_uuids == ("neuron-a", "neuron-b", "neuron-c")
    for other in ("neuron-a", "neuron-c"):
        assert (got[other].state, got[other].action, got[other].findings) == ("ok", "none", ())


def test_a_count_already_there_at_the_first_poll_is_growth_since_the_daemon_started():
    # The source counts neuron-monitor's per-period deltas from 0 at the daemon's start.
    got = by_uuid(judge().judge(poll({(0, "sram"): 2.0})))
    assert got["neuron-a"].action == "replace_device"
    assert got["neuron-a"].reason_states()["sram_uncorrectable"] == "failed"


def test_the_finding_holds_after_the_count_stops_growing_for_the_event_window():
    j = judge()
    j.judge(poll({(2, "hbm"): 1.0}))
    again = by_uuid(j.judge(poll({(2, "hbm"): 1.0})))
    assert again["neuron-c"].action == "replace_device"
    j.wall = lambda: NOW + j.window + 1
    assert by_uuid(j.judge(poll({(2, "hbm"): 1.0})))["neuron-c"].action == "none"


def test_corrected_errors_and_the_node_wide_hardware_count_fail_nobody():
    j = judge()
    j.judge(poll({}, corrected=0.0, hardware=0.0))
    got = j.judge(poll({}, corrected=500.0, hardware=40.0))
    assert {(r.state, r.action) for r in got} == {("ok", "none")}
    assert all(not r.reasons for r in got)


def test_a_device_missing_from_sysfs_asks_a_reboot_of_the_node():
    got = by_uuid(judge().judge(poll({}, down={1: "device_missing"})))
    gone = got["neuron-b"]
    assert (gone.state, gone.action, gone.scope, gone.escalation) == (
        "failed",
        "reboot_node",
        "node",
        "contact_vendor",
    )
    assert got["neuron-a"].state == "ok"


def test_a_monitor_down_leaves_the_devices_unknown_with_what_is_remembered():
    j = judge()
    j.judge(poll({}))
    j.judge(poll({(1, "hbm"): 1.0}))
    why = "neuron-monitor down: exited"
    unread = {ident: why for ident in DEVICES}
    # Its readings say every device down (the monitor's reason): no evidence about them.
    got = by_uuid(j.judge(poll({(1, "hbm"): 1.0}, down=dict.fromkeys(range(3), "exited")), unread))
    assert {r.state for r in got.values()} == {"unknown"}
    assert {r.unknown_why for r in got.values()} == {why}
    assert got["neuron-b"].action == "replace_device"  # remembered, not read
    assert got["neuron-a"].action == "none"


def test_the_memory_survives_a_restart_and_a_reboot_on_the_same_hardware():
    j = judge()
    j.judge(poll({(0, "hbm"): 1.0}))
    assert j.remembered()["neuron-a"].events  # what health.state_dir's file keeps
    for rebooted in (False, True):  # a reboot does not move the instance to other hardware
        fresh = judge()
        fresh.recall(j.remembered(), rebooted=rebooted)
        got = by_uuid(fresh.judge(poll({})))
        assert got["neuron-a"].action == "replace_device", rebooted
        assert got["neuron-a"].state == "failed"


def test_neuron_monitor_s_report_counts_the_uncorrectable_errors_by_memory():
    line = {
        "neuron_runtime_data": [],
        "system_data": {
            "neuron_hw_counters": {
                "error": "",
                "neuron_devices": [
                    {"neuron_device_index": 0, "mem_ecc_corrected": 4},
                    {"neuron_device_index": 1, "mem_ecc_uncorrected": 2, "sram_ecc_uncorrected": 1},
                ],
            }
        },
    }
    got = parse(json.dumps(line))
    assert got.uncorrected == {(0, "hbm"): 0, (0, "sram"): 0, (1, "hbm"): 2, (1, "sram"): 1}
    assert got.ecc == {(0, "corrected"): 4, (1, "uncorrected"): 3}
    line["system_data"]["neuron_hw_counters"]["error"] = "driver busy"  # type: ignore[index]
    assert parse(json.dumps(line)).uncorrected == {}
