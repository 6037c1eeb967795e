"""AMD RAS and partitions in this process: CPER/AFIDs with the cursor, bad pages, per-XCP values.

The real amdsmi package drives the fake libamd_smi.so, whose CPER ring holds
records with the real header layout; the expected counts are worked out here
from the ring's contents (entry i is record kind i % kinds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from exporter.backends.amdsmi import AmdSmiBackend
from exporter.backends.base import BackendError
from exporter.catalog import CATALOG
from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.backend_harness import poll, started, values

Make = Callable[..., AmdSmiBackend]
FATAL, UNCORRECTED, CORRECTED = (
    state.SEV_FATAL,
    state.SEV_NON_FATAL_UNCORRECTED,
    state.SEV_NON_FATAL_CORRECTED,
)
SEVERITY = {FATAL: "fatal", UNCORRECTED: "non_fatal_uncorrected", CORRECTED: "non_fatal_corrected"}
KINDS: list[Any] = [(FATAL, [30]), (CORRECTED, [12, 13]), (UNCORRECTED, [12])]


@pytest.fixture
def make(amdsmi_backends: Make) -> Make:
    return amdsmi_backends


def family(reply: dict[str, Any], metric: str, device: int = 0) -> dict[tuple[str, ...], float]:
    """{other labels: value} of one family for one device position."""
    return {
        labels[2:]: v
        for (name, labels), v in values(reply).items()
        if name == metric and labels[0] == str(device)
    }


def want_counts(kinds: list[Any], start: int, stop: int) -> dict[tuple[str, ...], float]:
    """AFID counts of ring entries start..stop-1 (records with a flaw count nothing)."""
    out: dict[tuple[str, ...], float] = {}
    for i in range(start, stop):
        kind = kinds[i % len(kinds)]
        if len(kind) > 2 and kind[2] != state.CPER_OK:
            continue
        for afid in kind[1]:
            key = (str(afid), SEVERITY[kind[0]])
            out[key] = out.get(key, 0) + 1
    return out


def test_afid_counts_are_exact_and_nothing_is_read_twice(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(0)
    state.cper(dev, KINDS, 7)
    backend = started(make)
    uuid = expected.uuid(dev)
    first = poll(backend, ledger={})
    assert first["ledger"][uuid]["cursor"] == 7
    assert family(first, "accel_amd_afid_errors_total") == want_counts(KINDS, 0, 7)
    # Newest record naming each AFID: 30 in entry 6, 12 in entry 5, 13 in entry 4.
    t0 = dev.cper_time0
    assert family(first, "accel_amd_afid_last_timestamp_seconds") == {
        ("30",): t0 + 6,
        ("12",): t0 + 5,
        ("13",): t0 + 4,
    }
    # Handing the ledger back: the same records are not counted again.
    again = poll(backend, ledger=first["ledger"])
    assert family(again, "accel_amd_afid_errors_total") == want_counts(KINDS, 0, 7)
    dev.cper_count = 10
    more = poll(backend, ledger=again["ledger"])
    assert more["ledger"][uuid]["cursor"] == 10
    assert family(more, "accel_amd_afid_errors_total") == want_counts(KINDS, 0, 10)
    # Other GPUs have empty rings: no AFID series, ledgers at cursor 0.
    assert family(more, "accel_amd_afid_errors_total", device=1) == {}
    assert more["ledger"][expected.uuid(amdsmi_inprocess.device(1))]["cursor"] == 0


def test_a_new_worker_goes_on_from_the_ledger_it_is_given(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(3)
    state.cper(dev, KINDS, 5)
    old = started(make)
    ledger = poll(old, ledger={})["ledger"]
    old.close()
    dev.cper_count = 9
    new = started(make)
    reply = poll(new, ledger=ledger)
    assert family(reply, "accel_amd_afid_errors_total", device=3) == want_counts(KINDS, 0, 9)
    # A worker whose reply was lost: the daemon still has the older ledger, and the
    # next worker reads those records once.
    dev.cper_count = 12
    lost = poll(new, ledger=reply["ledger"])
    assert family(lost, "accel_amd_afid_errors_total", device=3) == want_counts(KINDS, 0, 12)
    retry = poll(new, ledger=reply["ledger"])
    assert family(retry, "accel_amd_afid_errors_total", device=3) == want_counts(KINDS, 0, 12)


def test_a_burst_is_read_in_bounded_chunks(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    dev = amdsmi_inprocess.device(0)
    state.cper(dev, KINDS, 10_000)
    backend = started(make, cper_per_poll=256)
    uuid = expected.uuid(dev)
    ledger: dict[str, Any] = {}
    cursors = []
    for _ in range(3):
        reply = poll(backend, ledger=ledger, slow=False)
        ledger = reply["ledger"]
        cursors.append(ledger[uuid]["cursor"])
        assert all(d["up"] for d in reply["devices"])
    assert cursors == [256, 512, 768]
    assert family(reply, "accel_amd_afid_errors_total") == want_counts(KINDS, 0, 768)


def test_bad_records_are_skipped_and_counted_the_rest_exported(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(2)
    kinds: list[Any] = [
        (FATAL, [30]),
        (FATAL, [31], state.CPER_BAD_LENGTH),
        (CORRECTED, [12], state.CPER_UNKNOWN_SECTION),
        (UNCORRECTED, [40], state.CPER_SHORT_SECTION),
        (CORRECTED, [12]),
    ]
    state.cper(dev, kinds, 10)
    backend = started(make)
    reply = poll(backend, ledger={})
    assert reply["devices"][2]["up"] is True
    assert family(reply, "accel_amd_afid_errors_total", device=2) == want_counts(kinds, 0, 10)
    assert family(reply, "accel_amd_cper_records_skipped_total", device=2) == {
        ("bad_length",): 2,
        ("afid_unexpected_data",): 2,
        ("afid_unexpected_size",): 2,
    }
    assert reply["ledger"][expected.uuid(dev)]["cursor"] == 10


def test_no_cper_ring_is_no_series_and_no_fault(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    amdsmi_inprocess.device(0).cper_unsupported = 1
    # Before amdsmi 7.1 an empty ring answered FILE_ERROR: no records, the GPU is fine.
    amdsmi_inprocess.rule("amdsmi_get_gpu_cper_entries", state.FILE_ERROR, device=1)
    amdsmi_inprocess.rule("amdsmi_get_gpu_cper_entries", state.BUSY, device=2)
    backend = started(make)
    reply = poll(backend, ledger={})
    assert all(d["up"] for d in reply["devices"])
    for i in (0, 1, 2):
        assert family(reply, "accel_amd_afid_errors_total", device=i) == {}
    # The busy ring keeps its cursor for the next poll; the others have none to keep.
    assert reply["ledger"][expected.uuid(amdsmi_inprocess.device(2))]["cursor"] == 0
    assert family(reply, "accel_utilization_ratio", device=2) == {
        (): amdsmi_inprocess.device(2).gfx_activity / 100
    }


def test_a_malformed_ledger_from_the_daemon_is_refused(make: Make) -> None:
    backend = started(make)
    with pytest.raises(BackendError) as info:
        poll(backend, ledger={"x": {"cursor": -1}})
    assert info.value.reason == "bad_request"


def test_bad_pages_and_threshold(make: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    dev = amdsmi_inprocess.device(1)
    dev.bad_pages[:] = [5, 2, 1]
    dev.bad_page_threshold = 10
    amdsmi_inprocess.device(2).bad_page_unsupported = 1
    amdsmi_inprocess.device(3).bad_page_threshold = state.U32_NA
    backend = started(make)
    reply = poll(backend, ledger={})
    assert family(reply, "accel_retired_pages", device=1) == {("",): 5}
    assert family(reply, "accel_retired_pages_pending", device=1) == {(): 1}
    assert family(reply, "accel_amd_bad_pages", device=1) == {("pending",): 2, ("unreservable",): 1}
    assert family(reply, "accel_amd_bad_page_threshold", device=1) == {(): 10}
    assert family(reply, "accel_retired_pages_pending", device=0) == {(): 0}
    assert family(reply, "accel_retired_pages", device=2) == {}
    assert family(reply, "accel_amd_bad_page_threshold", device=3) == {}
    for i in range(8):
        got = {
            (name, tuple(sorted(zip(CATALOG[name].labels, labels, strict=True)))): v
            for (name, labels), v in values(reply).items()
            if labels[0] == str(i)
        }
        want = expected.series(amdsmi_inprocess.device(i), i)
        want.pop(
            (
                "accel_device_up",
                tuple(
                    sorted(
                        {
                            "device": str(i),
                            "uuid": expected.uuid(amdsmi_inprocess.device(i)),
                        }.items()
                    )
                ),
            )
        )
        assert got == want


def test_cpx_node_of_64_partitions_exports_each_partitions_own_xcp(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    state.cpx(amdsmi_inprocess, gpus=8)
    for g in range(8):  # one CPER ring per GPU, read through its first partition
        state.cper(amdsmi_inprocess.device(8 * g), KINDS, g + 1)
    backend = make()
    inventory = backend.bootstrap()
    assert len(inventory["devices"]) == 64
    reply = poll(backend, ledger={})
    assert all(d["up"] for d in reply["devices"])
    got = values(reply)
    for i in range(64):
        g, p = divmod(i, 8)
        dev = amdsmi_inprocess.device(i)
        mine = {k: v for k, v in got.items() if k[1][0] == str(i)}
        busy = (5 * g + p) / 100
        assert mine[("accel_utilization_ratio", (str(i), expected.uuid(dev)))] == busy
        assert busy != dev.gfx_activity / 100  # never the whole GPU's figure
        xcp = {k[1][2:]: v for k, v in mine.items() if k[0] == "accel_amd_xcp_utilization_ratio"}
        assert xcp == {(str(p),): busy}
        want = expected.series(dev, i)
        series = {
            (name, tuple(sorted(zip(CATALOG[name].labels, labels, strict=True)))): v
            for (name, labels), v in mine.items()
        }
        assert {k: series.get(k) for k in want if k[0] != "accel_device_up"} == {
            k: v for k, v in want.items() if k[0] != "accel_device_up"
        }
        afids = family(reply, "accel_amd_afid_errors_total", device=i)
        assert afids == (want_counts(KINDS, 0, g + 1) if p == 0 else {})
        assert ("accel_retired_pages_pending", (str(i), expected.uuid(dev))) in mine or p != 0


def test_xcp_values_not_available_are_skipped_and_counted(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(0)
    dev.xcp_acc[0][0][3] = state.U64_NA  # XCC 3's ppt accumulator of XCP 0: N/A
    dev.xcp_acc[2][0][5] = state.U64_NA
    backend = started(make)
    reply = poll(backend, ledger={}, slow=False)
    assert family(reply, "accel_field_errors_total") == {("amdsmi", "xcp_value_not_available"): 2}
    residency = family(reply, "accel_amd_violation_residency_total")
    busy = [dev.xcp_busy[0][c] for c in range(8)]
    ppt = [10 * b for c, b in enumerate(busy) if c != 3]
    assert residency[("gfx_below_host_limit_ppt", "0")] == sum(ppt) / len(ppt)
    assert residency[("gfx_below_host_limit_thermal", "0")] == sum(busy) / 8
    assert family(reply, "accel_amd_xcp_utilization_ratio") == {("0",): sum(busy) / 8 / 100}
    # Counted since the worker started: the next poll adds the same two.
    again = poll(backend, ledger={}, slow=False)
    assert family(again, "accel_field_errors_total") == {("amdsmi", "xcp_value_not_available"): 4}


def test_a_partition_whose_xcp_is_not_available_has_no_utilization(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    state.cpx(amdsmi_inprocess, gpus=1)
    amdsmi_inprocess.device(5).xcp_busy[5][0] = state.U32_NA
    backend = started(make)
    reply = poll(backend, ledger={}, slow=False)
    assert family(reply, "accel_utilization_ratio", device=5) == {}
    assert family(reply, "accel_amd_xcp_utilization_ratio", device=5) == {}
    assert family(reply, "accel_field_errors_total", device=5) == {
        ("amdsmi", "xcp_not_available"): 1
    }
    assert family(reply, "accel_utilization_ratio", device=4) == {(): 0.04}


def test_a_ring_shorter_than_the_cursor_is_read_again_from_its_start(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    dev = amdsmi_inprocess.device(0)
    state.cper(dev, KINDS, 7)
    backend = started(make)
    first = poll(backend, ledger={}, slow=False)
    # The driver is reloaded: its ring starts again, with two new records.
    dev.cper_count = 2
    again = poll(backend, ledger=first["ledger"], slow=False)
    assert again["ledger"][expected.uuid(dev)]["cursor"] == 2
    both = want_counts(KINDS, 0, 7)
    for key, n in want_counts(KINDS, 0, 2).items():
        both[key] = both.get(key, 0) + n
    assert family(again, "accel_amd_afid_errors_total") == both
    assert family(again, "accel_field_errors_total") == {("amdsmi", "cper_ring_restarted"): 1}


def test_a_container_that_sees_one_cpx_partition_knows_which_partition_of_which_gpu(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    # The runtime passed one partition (the fourth of GPU 2): amdsmi enumerates only
    # it, and as a secondary partition it does not report the partition modes.
    amdsmi_inprocess.state.device_count = 1
    dev = amdsmi_inprocess.device(0)
    state.cpx_partition(dev, 2, 3)
    backend = make()
    info = backend.bootstrap()["devices"][0]["info"]
    assert info["compute_partition"] == "CPX"
    assert info["partition"] == "3"
    assert info["physical_gpu"] == expected.pci_bus_id(dev)[:-1] + "0"
    assert info["physical_gpu"] != info["pci_bus_id"]
    reply = poll(backend, ledger={}, slow=False)
    assert family(reply, "accel_amd_xcp_utilization_ratio") == {("3",): (5 * 2 + 3) / 100}
    assert family(reply, "accel_utilization_ratio") == {(): (5 * 2 + 3) / 100}


def test_every_cpx_partition_names_its_gpu_and_its_place_in_it(
    make: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    state.cpx(amdsmi_inprocess, gpus=2)
    devices = make().bootstrap()["devices"]
    for i, device in enumerate(devices):
        g, p = divmod(i, 8)
        info = device["info"]
        assert (info["compute_partition"], info["memory_partition"]) == ("CPX", "NPS1"), info
        assert info["partition"] == str(p)
        first = expected.pci_bus_id(amdsmi_inprocess.device(8 * g))
        assert info["physical_gpu"] == first, info
    assert len({d["info"]["physical_gpu"] for d in devices}) == 2
