"""The evidence board and the judge's use of it: keys, replace, expiry, threads, verdicts."""

from __future__ import annotations

import threading

import pytest

from exporter import actions, health
from exporter.catalog.device import INFO_LABELS
from exporter.evidence import Evidence, EvidenceBoard, device_key
from exporter.health import HealthJudge
from exporter.model import Reading
from exporter.sources.pci import normalize_bus_id
from exporter.verdict import DEGRADED, FAILED, OK, PREDICTED, UNKNOWN

A = ("0", "GPU-a")
B = ("1", "GPU-b")
RESET = actions.Advice(
    actions.RESET_DEVICE, reference="DCGM dcgm_errors.h", provenance="vendor_catalog"
)
SERVICE = actions.Advice(actions.SERVICE, detail="look at the link")


def ev(
    reason: str = "diag_failed",
    state: str = FAILED,
    source: str = "diag",
    advice: actions.Advice = RESET,
    at: float = 100.0,
    until: float = 200.0,
    detail: str = "",
) -> Evidence:
    return Evidence(source, reason, state, advice, at, until, detail)


def info(ident: tuple[str, str], bus: str) -> Reading:
    values = dict.fromkeys(INFO_LABELS, "")
    values.update(vendor="nvidia", device=ident[0], uuid=ident[1], pci_bus_id=bus)
    return Reading("accel_device_info", tuple(values[k] for k in INFO_LABELS), 1.0)


def up(ident: tuple[str, str], value: float = 1.0) -> Reading:
    return Reading("accel_device_up", ident, value)


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("  0001:C1:00.7 ", "0001:c1:00.7"),
        ("3B:00.0", "0000:3b:00.0"),
        (" GPU-1d2c3b4a-0000-1111-2222-333344445555 ", "GPU-1d2c3b4a-0000-1111-2222-333344445555"),
        ("MIG-GPU-abc/1/0", "MIG-GPU-abc/1/0"),
        ("GPU-ABC", "GPU-ABC"),  # a UUID is compared as given, never lowered
    ],
)
def test_device_key(given: str, key: str) -> None:
    assert device_key(given) == key


@pytest.mark.parametrize("bus", ["00000000:3B:00.0", "0000:3b:00.0", "0002:0A:1f.3"])
def test_a_bus_id_with_its_domain_is_normalized_as_the_pci_source_does(bus: str) -> None:
    assert device_key(bus) == normalize_bus_id(bus)


def test_for_device_by_uuid_or_bus_id_and_only_live_items() -> None:
    board = EvidenceBoard()
    by_uuid = ev(reason="diag_failed")
    by_bus = ev(reason="pcie_link_downtrained", state=DEGRADED, source="fabric", advice=SERVICE)
    stale = ev(reason="diag_warning", state=DEGRADED, until=150.0)
    board.replace("diag", {"GPU-a": [by_uuid, stale]})
    board.replace("fabric", {"00000000:3B:00.0": [by_bus]})
    got = board.for_device("GPU-a", "0000:3b:00.0", now=120.0)
    assert got == [by_uuid, stale, by_bus]
    assert board.for_device("GPU-a", "0000:3b:00.0", now=150.0) == [by_uuid, by_bus]
    assert board.for_device("GPU-a", "", now=150.0) == [by_uuid]
    assert board.for_device("", "3b:00.0", now=150.0) == [by_bus]
    assert board.for_device("GPU-b", "0000:3c:00.0", now=120.0) == []
    assert board.for_device("", "", now=120.0) == []
    assert board.for_device("GPU-a", "", now=200.0) == []  # expires_at itself: gone


def test_replace_drops_what_the_source_no_longer_posts_and_only_its_own() -> None:
    board = EvidenceBoard()
    mine, theirs = ev(), ev(reason="nic_flap", state=DEGRADED, source="fabric")
    board.replace("diag", {"GPU-a": [mine]})
    board.replace("fabric", {"GPU-a": [theirs]})
    assert board.sources() == ["diag", "fabric"]
    board.replace("diag", {"GPU-b": [mine]})
    assert board.for_device("GPU-a", "", 120.0) == [theirs]
    assert board.for_device("GPU-b", "", 120.0) == [mine]
    board.replace("diag", {})
    assert board.sources() == ["fabric"]
    assert board.for_device("GPU-b", "", 120.0) == []


def test_an_item_posted_under_both_its_keys_is_listed_once() -> None:
    board = EvidenceBoard()
    item = ev()
    board.replace("diag", {"GPU-a": [item], "0000:3b:00.0": [item]})
    assert board.for_device("GPU-a", "0000:3B:00.0", 120.0) == [item]


@pytest.mark.parametrize(
    ("source", "item", "why"),
    [
        ("diag", ev(source="fabric"), "posted as"),
        ("fabric", ev(source="fabric", state=FAILED), "may not post failed"),
        ("trend", ev(source="trend", state=OK), "none of"),
        ("diag", ev(state=UNKNOWN), "none of"),
    ],
)
def test_refused_items_post_nothing(source: str, item: Evidence, why: str) -> None:
    board = EvidenceBoard()
    board.replace(source, {"GPU-z": [ev(source=source, state=DEGRADED)]})
    before = board.for_device("GPU-z", "", 120.0)
    with pytest.raises(ValueError, match=why):
        board.replace(source, {"GPU-a": [item]})
    assert board.for_device("GPU-z", "", 120.0) == before
    assert board.for_device("GPU-a", "", 120.0) == []


def test_readers_and_writers_on_many_threads_see_whole_postings() -> None:
    board = EvidenceBoard()
    stop = threading.Event()
    seen_sizes: set[int] = set()
    errors: list[BaseException] = []

    def write(source: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            size = 1 + n % 3
            items = [ev(source=source, state=DEGRADED, detail=str(i)) for i in range(size)]
            board.replace(source, {"GPU-a": items})

    def read() -> None:
        try:
            for _ in range(2000):
                got = board.for_device("GPU-a", "", 120.0)
                for source in ("fabric", "trend"):
                    mine = [e for e in got if e.source == source]
                    seen_sizes.add(len(mine))
                    # A posting is seen whole: details 0..size-1, never a mix of two.
                    assert [e.detail for e in mine] == [str(i) for i in range(len(mine))]
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(s,)) for s in ("fabric", "trend")]
    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    for t in writers:
        t.join()
    assert errors == []
    assert seen_sizes <= {0, 1, 2, 3}


def wall_judge(board: EvidenceBoard, wall: list[float]) -> HealthJudge:
    return HealthJudge(clock=lambda: 0.0, wall=lambda: wall[0], evidence=board)


def test_the_judge_adds_live_evidence_as_reasons_and_findings() -> None:
    board, wall = EvidenceBoard(), [120.0]
    judge = wall_judge(board, wall)
    board.replace(
        "diag", {"GPU-b": [ev(detail="GPU 1: Memory test failed (DCGM_FR_FAULTY_MEMORY)")]}
    )
    board.replace(
        "fabric",
        {"0000:3b:00.0": [ev("pcie_link_downtrained", DEGRADED, "fabric", SERVICE, 110.0, 300.0)]},
    )
    readings = [up(A), up(B), info(A, "00000000:3B:00.0"), info(B, "00000000:3C:00.0")]
    records = {r.uuid: r for r in judge.judge(readings)}
    a, b = records["GPU-a"], records["GPU-b"]
    assert (a.state, a.reason_states(), a.action) == (
        DEGRADED,
        {"pcie_link_downtrained": DEGRADED},
        actions.SERVICE,
    )
    assert a.findings[0].detail == "look at the link" and a.findings[0].at == 110.0
    assert (b.state, b.reason_states(), b.action) == (
        FAILED,
        {"diag_failed": FAILED},
        "reset_device",
    )
    (finding,) = b.findings
    assert finding.reason == "diag_failed"
    assert finding.detail == "GPU 1: Memory test failed (DCGM_FR_FAULTY_MEMORY)"
    assert (finding.provenance, finding.reference) == ("vendor_catalog", "DCGM dcgm_errors.h")
    assert finding.at == 100.0
    # The health families carry it like any other reason.
    out = {(r.metric, r.labels) for r in health.readings([b]) if r.value == 1}
    assert ("accel_device_health_reason_info", (*B, "diag_failed")) in out
    # Expired: gone at the next poll, no memory of it in the judge.
    wall[0] = 250.0
    records = {r.uuid: r for r in judge.judge(readings)}
    assert (records["GPU-b"].state, records["GPU-b"].reasons) == (OK, ())
    assert records["GPU-a"].state == DEGRADED  # the fabric's runs until 300


def test_evidence_never_lowers_a_worse_state_of_the_same_reason() -> None:
    board, wall = EvidenceBoard(), [120.0]
    board.replace("diag", {"GPU-a": [ev(), ev(state=DEGRADED, at=101.0)]})
    board.replace("trend", {"GPU-a": [ev(state=PREDICTED, source="trend")]})
    (record,) = wall_judge(board, wall).judge([up(A)])
    assert record.reason_states() == {"diag_failed": FAILED}
    # One finding per reason: the most disruptive item's advice, dated by the newest.
    (finding,) = record.findings
    assert (finding.reason, finding.action, finding.at) == ("diag_failed", "reset_device", 101.0)
    # Nor does it lower a rule's worse state: the device is down (failed) and a trend says
    # predicted: failed wins, both reasons listed.
    (record,) = wall_judge(board, wall).judge([up(A, 0.0)])
    assert record.state == FAILED and "device_down" in record.reason_states()


def test_one_finding_per_reason_names_every_item_and_the_worst_advice() -> None:
    board, wall = EvidenceBoard(), [120.0]
    watch = actions.Advice(actions.NONE, detail="monitor it")
    mild = ev(state=DEGRADED, advice=watch, at=110.0, detail="dcgm pcie: DCGM_FR_LOW_BANDWIDTH")
    bad = ev(at=100.0, detail="dcgm memory: DCGM_FR_FAULTY_MEMORY")
    board.replace("diag", {"GPU-a": [mild, bad]})
    (record,) = wall_judge(board, wall).judge([up(A)])
    (finding,) = record.findings
    assert finding.action == "reset_device" and finding.at == 110.0
    assert finding.detail == "dcgm memory: DCGM_FR_FAULTY_MEMORY; dcgm pcie: DCGM_FR_LOW_BANDWIDTH"
    assert record.reason_states() == {"diag_failed": FAILED}
    rows = [r for r in health.readings([record]) if r.metric == "accel_device_action_reason_info"]
    assert len(rows) == 1


def test_an_unread_device_stays_unknown_and_lists_its_evidence() -> None:
    board, wall = EvidenceBoard(), [120.0]
    judge = wall_judge(board, wall)
    judge.judge([up(A), info(A, "0000:3b:00.0")])  # its bus id learnt while read
    board.replace("fabric", {"0000:3b:00.0": [ev("nic_flap", DEGRADED, "fabric", SERVICE)]})
    (record,) = judge.judge([], unread={A: "worker restarting: timeout"})
    assert record.state == UNKNOWN
    assert record.reason_states() == {"nic_flap": DEGRADED}
    assert record.action == actions.SERVICE
    assert [f.reason for f in record.findings] == ["nic_flap"]


def test_a_judge_without_evidence_is_as_before() -> None:
    board = EvidenceBoard()
    (record,) = wall_judge(board, [120.0]).judge([up(A), info(A, "0000:3b:00.0")])
    assert (record.state, record.reasons, record.findings) == (OK, (), ())


def test_a_device_gone_for_the_window_forgets_its_bus_id_too() -> None:
    board, wall = EvidenceBoard(), [120.0]
    judge = HealthJudge(clock=lambda: 0.0, wall=lambda: wall[0], window=60.0, evidence=board)
    judge.judge([up(A), up(B), info(A, "0000:3b:00.0"), info(B, "0000:3c:00.0")])
    wall[0] = 200.0  # A is in no poll for longer than the window
    judge.judge([up(B), info(B, "0000:3c:00.0")])
    assert A not in judge._bus and judge._bus[B] == "0000:3c:00.0"
    board.replace(
        "fabric", {"0000:3b:00.0": [ev("nic_flap", DEGRADED, "fabric", SERVICE, 190.0, 300.0)]}
    )
    # Not a device of this judge any more: the evidence about its old address reaches no one.
    assert [r.uuid for r in judge.judge([up(B), info(B, "0000:3c:00.0")])] == ["GPU-b"]
