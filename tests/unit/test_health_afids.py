"""The health judge on AFIDs: the table's severity and advice, repeats, AMD's reset scope."""

from __future__ import annotations

from exporter import health
from exporter.health import HealthJudge
from exporter.model import Reading

NOW = 1_800_000_000.0
A, B = ("0", "GPU-a"), ("1", "GPU-b")


def up(ident=A):
    return Reading("accel_device_up", ident, 1.0)


def afid(code, severity, count=1.0, age=10.0, ident=A):
    return [
        Reading("accel_amd_afid_errors_total", (*ident, code, severity), float(count)),
        Reading("accel_amd_afid_last_timestamp_seconds", (*ident, code), NOW - age),
    ]


def judge(**kw):
    return HealthJudge(clock=lambda: 0.0, wall=lambda: NOW, source="amdsmi", **kw)


def test_afid_24_asks_none_and_leaves_the_device_ok():
    (got,) = judge().judge([up(), *afid("24", "non_fatal_corrected", 40)])
    assert (got.state, got.action, got.reasons) == ("ok", "none", ())
    (finding,) = got.findings
    assert (finding.reason, finding.action, finding.provenance) == (
        "afid_24",
        "none",
        "exporter_rule",
    )


def test_the_tables_severity_wins_over_the_records():
    # A fatal record naming the corrected HBM AFID: the decoder's per-error severity counts.
    (got,) = judge().judge([up(), *afid("24", "fatal")])
    assert (got.state, got.findings[0].severity) == ("ok", "non_fatal_corrected")
    (got,) = judge().judge([up(), *afid("30", "non_fatal_corrected")])
    assert (got.state, got.action, got.findings[0].severity) == (
        "failed",
        "replace_device",
        "fatal",
    )


def test_a_non_fatal_afid_degrades_and_escalates_when_it_repeats():
    j = judge()
    (once,) = j.judge([up(), *afid("22", "non_fatal_uncorrected", 1, age=30)])
    assert (once.state, once.action, once.escalation) == ("degraded", "none", "")
    assert [r.reason for r in once.reasons] == ["afid_recent"]
    assert once.findings[0].escalation == "reboot_node"
    (twice,) = j.judge([up(), *afid("22", "non_fatal_uncorrected", 2, age=20)])
    assert (twice.state, twice.action) == ("degraded", "none")
    (third,) = j.judge([up(), *afid("22", "non_fatal_uncorrected", 3)])
    assert (third.state, third.action, third.scope) == ("failed", "reboot_node", "node")
    assert [r.reason for r in third.reasons] == ["afid_repeated"]
    (finding,) = third.findings
    assert (finding.escalation, finding.escalation_scope) == ("replace_device", "device")
    # The escalation is remembered as an event: a new judge recalling the memory has it.
    again = judge()
    again.recall(j.remembered(), rebooted=False)
    (kept,) = again.judge([up(), *afid("22", "non_fatal_uncorrected", 3)])
    assert (kept.state, kept.action) == ("failed", "reboot_node")
    # A reboot resolves what a reboot resolves.
    rebooted = judge()
    rebooted.recall(j.remembered(), rebooted=True)
    (after,) = rebooted.judge([up()])
    assert (after.state, after.action) == ("ok", "none")


def test_sections_of_one_record_are_not_a_repeat():
    # One CPER record naming AFID 22 in three sections: the count grows by 3, one time.
    j = judge()
    j.judge([up(), *afid("22", "non_fatal_uncorrected", 1, age=30)])
    (got,) = j.judge([up(), *afid("22", "non_fatal_uncorrected", 4, age=20)])
    assert (got.state, got.action) == ("degraded", "none")


def test_an_afids_first_sight_counts_its_newest_record_only():
    # Five records, read at once (a daemon start re-reading the ring): older ones may be
    # from long ago, so this is one record, not a repeat.
    (got,) = judge().judge([up(), *afid("28", "non_fatal_uncorrected", 5)])
    assert (got.state, got.action) == ("degraded", "none")


def test_reboot_node_reaches_the_node_and_the_escalation_is_kept():
    readings = [up(A), up(B), *afid("26", "fatal")]
    records = {r.uuid: r for r in judge().judge(readings)}
    got = records["GPU-a"]
    assert (got.state, got.action, got.scope, got.escalation) == (
        "failed",
        "reboot_node",
        "node",
        "replace_device",
    )
    assert got.scope_uuids == ("GPU-a", "GPU-b")
    assert records["GPU-b"].state == "ok"
    # The reboot reaches the node, its escalation (an RMA) only the device: the record,
    # its reason series and /v1/devices all say how far the escalation reaches.
    assert got.escalation_scope == "device"
    (labels,) = [
        r.labels for r in health.readings([got]) if r.metric == "accel_device_action_reason_info"
    ]
    assert labels == (
        *A,
        "afid_26",
        "reboot_node",
        "node",
        "replace_device",
        "device",
        "vendor_inferred",
    )


def test_18_asks_for_the_tray_reseat_with_the_baseboard_as_scope():
    (got,) = judge().judge([up(), *afid("18", "fatal")])
    (finding,) = got.findings
    assert (got.state, got.action, got.scope) == ("failed", "inspect_hardware", "baseboard")
    assert (finding.escalation, finding.escalation_scope) == ("replace_device", "baseboard")
    assert finding.detail.startswith("reseat the GPU tray")
    assert finding.provenance == "vendor_inferred"


def test_an_unknown_afid_asks_service_with_its_code():
    (got,) = judge().judge([up(), *afid("77", "non_fatal_uncorrected")])
    (finding,) = got.findings
    assert (got.state, got.action, finding.provenance) == ("failed", "service", "unknown_code")
    assert "AFID 77" in finding.detail


def test_every_reset_on_an_amd_device_reaches_its_peer_domain():
    down = [Reading("accel_device_up", A, 0.0)]
    (amd,) = judge().judge(down)
    assert (amd.action, amd.scope) == ("reset_device", "peer_domain")
    assert amd.findings[0].scope == "peer_domain"
    (override,) = judge(afid_actions={"30": "reset_device"}).judge([up(), *afid("30", "fatal")])
    assert (override.action, override.scope) == ("reset_device", "peer_domain")
    # Another vendor's reset reaches its physical GPU's partitions (the GPU alone here).
    nvidia = HealthJudge(clock=lambda: 0.0, wall=lambda: NOW, source="nvml")
    (other,) = nvidia.judge(down)
    assert (other.action, other.scope, other.scope_uuids) == ("reset_device", "partition", A[1:])


def test_a_devices_reach_is_the_widest_of_every_finding_that_asks():
    # AFID 30 asks the GPU's replacement (the partition: the GPU alone here), AFID 26 a
    # reboot: the node goes down for it, so the record reaches the node while its
    # action stays the most disruptive one, with that one's escalation.
    records = {
        r.uuid: r for r in judge().judge([up(A), up(B), *afid("30", "fatal"), *afid("26", "fatal")])
    }
    got = records["GPU-a"]
    assert (got.action, got.scope, got.scope_uuids) == (
        "replace_device",
        "node",
        ("GPU-a", "GPU-b"),
    )
    scopes = {f.reason: f.scope for f in got.findings}
    assert scopes == {"afid_26": "node", "afid_30": "partition"}


def test_a_replacement_on_a_partitioned_gpu_reaches_every_partition_of_it():
    # Two partitions of one physical GPU and another GPU: replacing takes the GPU.
    p0, p1, other = ("0", "GPU-p0"), ("1", "GPU-p1"), ("2", "GPU-c")
    info = [
        Reading("accel_device_domain_info", (*p0, "partition", "phys-a"), 1.0),
        Reading("accel_device_domain_info", (*p1, "partition", "phys-a"), 1.0),
    ]
    readings = [up(p0), up(p1), up(other), *info, *afid("30", "fatal", ident=p0)]
    got = {r.uuid: r for r in judge().judge(readings)}["GPU-p0"]
    assert (got.action, got.scope, got.scope_uuids) == (
        "replace_device",
        "partition",
        ("GPU-p0", "GPU-p1"),
    )
