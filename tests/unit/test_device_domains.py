"""The domains a device source keeps per device, and the reach an action gets from them."""

from __future__ import annotations

from exporter import health, scope
from exporter.model import Reading
from exporter.sources.device_domains import FAMILY, DomainMemory
from exporter.verdict import DeviceHealth, Finding

HIVE_A, HIVE_B = "xgmi-hive:0xa", "xgmi-hive:0xb"
DEVICES = [(str(i), f"GPU-{i}") for i in range(8)]


def row(i: int, scope_name: str, domain: str) -> Reading:
    return Reading(FAMILY, (*DEVICES[i], scope_name, domain), 1.0)


def two_hives() -> DomainMemory:
    """GPUs 0-3 in hive A, 4-6 in hive B, 7 naming none."""
    memory = DomainMemory()
    slow = [row(i, "peer_domain", HIVE_A if i < 4 else HIVE_B) for i in range(7)]
    rest = memory.learn([*slow, Reading("accel_power_watts", DEVICES[0], 1.0)], DEVICES)
    assert [r.metric for r in rest] == ["accel_power_watts"]  # domain rows taken out
    return memory


def domains_of(memory: DomainMemory, info: dict[str, dict[str, str]] | None = None):
    """The domains map the health judge builds from the exported rows."""
    out: dict[tuple[str, ...], dict[str, str]] = {}
    for device, uuid in DEVICES:
        out[(device, uuid)] = {}
        for r in memory.readings(device, uuid, (info or {}).get(uuid, {})):
            out[(device, uuid)][r.labels[2]] = r.labels[3]
    return out


def test_a_hive_reset_names_exactly_its_hive_and_an_unnamed_one_widens():
    domains = domains_of(two_hives())
    assert scope.members("peer_domain", DEVICES[5], domains) == ("GPU-4", "GPU-5", "GPU-6")
    assert scope.members("peer_domain", DEVICES[1], domains) == tuple(f"GPU-{i}" for i in range(4))
    # GPU 7 names no hive (and nobody names a board): its peer-domain action is the node's.
    assert scope.members("peer_domain", DEVICES[7], domains) == tuple(u for _, u in DEVICES)
    assert scope.members("baseboard", DEVICES[1], domains) == tuple(u for _, u in DEVICES)


def test_what_a_device_named_is_kept_while_it_is_down_and_cleared_when_up_without():
    memory = two_hives()
    # GPU 2 is down at the next slow poll (its rows dropped): its hive stays.
    up = [d for d in DEVICES if d != DEVICES[2]]
    memory.learn([row(i, "peer_domain", HIVE_A) for i in (0, 1, 3)], up)
    assert memory.domains("GPU-2", {}) == {"peer_domain": HIVE_A}
    # GPU 5 answered and named none: its fabric is gone, its actions widen.
    assert memory.domains("GPU-5", {}) == {}
    # A new inventory without GPU 0 forgets it.
    memory.keep(u for _, u in DEVICES[1:])
    assert memory.domains("GPU-0", {}) == {}
    assert memory.domains("GPU-1", {}) == {"peer_domain": HIVE_A}


def test_partition_domain_comes_from_physical_gpu_and_backends_cannot_name_it():
    memory = DomainMemory()
    rows = [row(0, "partition", "bogus"), row(0, "rack", "r1"), row(0, "baseboard", "")]
    memory.learn(rows, DEVICES[:1])
    assert memory.domains("GPU-0", {}) == {}
    info = {f"GPU-{i}": {"physical_gpu": f"0000:{0x11 + i // 4:02x}:00.0"} for i in range(8)}
    memory.learn([row(i, "peer_domain", HIVE_A) for i in range(8)], DEVICES)
    got = [r.labels for r in memory.readings("1", "GPU-1", info["GPU-1"])]
    assert got == [
        ("1", "GPU-1", "partition", "0000:11:00.0"),
        ("1", "GPU-1", "peer_domain", HIVE_A),
    ]
    domains = domains_of(memory, info)
    assert scope.members("partition", DEVICES[5], domains) == ("GPU-4", "GPU-5", "GPU-6", "GPU-7")
    # Unpartitioned: the device alone.
    assert scope.members("partition", DEVICES[5], domains_of(two_hives())) == ("GPU-5",)


def test_the_scope_family_names_every_device_the_action_reaches():
    domains = domains_of(two_hives())
    reach = scope.members("peer_domain", DEVICES[4], domains)
    finding = Finding("afid_30", "reset_device", scope="peer_domain", escalation="replace_device")
    record = DeviceHealth(
        *DEVICES[4],
        "failed",
        (),
        (finding,),
        "reset_device",
        1.0,
        1.0,
        scope="peer_domain",
        scope_uuids=reach,
        escalation="replace_device",
    )
    rows = [
        r.labels for r in health.readings([record]) if r.metric == "accel_device_action_scope_info"
    ]
    assert rows == [("4", "GPU-4", "peer_domain", u) for u in ("GPU-4", "GPU-5", "GPU-6")]
    reasons = [
        r.labels for r in health.readings([record]) if r.metric == "accel_device_action_reason_info"
    ]
    assert reasons == [
        (
            "4",
            "GPU-4",
            "afid_30",
            "reset_device",
            "peer_domain",
            "replace_device",
            "",
            "exporter_rule",
        )
    ]
