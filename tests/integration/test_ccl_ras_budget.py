"""A RAS report of 10,000 communicators, end to end: series capped, drops counted, worst kept.

Without the budget this report is about 270,000 lines and 31 MB of /metrics on the
job's reporter node (review-4 M3); the store holds it to the RAS rows' ``max_series``.
"""

from __future__ import annotations

import asyncio

from exporter.catalog import budget
from exporter.config.ccl import CclRasSourceConfig
from exporter.model import OK, Snapshot
from exporter.outputs.prometheus import Exposition
from exporter.sources.ccl_ras import CclRasSource
from exporter.store import Store, validate
from tests.helpers.daemon import value
from tests.helpers.fake_ras import FakeRasServer
from tests.helpers.ras_reports import FakeComm, FakeJob, FakeRank

HOST = "10.0.0.1"
RANKS = 4
# Communicators with a missing rank: the worst, so kept however many others there are.
BAD = (9000, 9500, 9999)


def job(comms: int) -> FakeJob:
    out = []
    for index in range(comms):
        ranks = [FakeRank(r, HOST, 10000 + r, r, counts=[0, 0, 0, 0, 100]) for r in range(RANKS)]
        if index in BAD:
            ranks[-1].fate = "missing"
        out.append(FakeComm(0x10_0000_0000 + index, ranks))
    return FakeJob(out)


def comm_label(index: int) -> str:
    return f"{0x10_0000_0000 + index:016x}"


def scrape(comms: int) -> tuple[str, str, int]:
    """The exposition of one RAS poll of a job of ``comms`` communicators, its address, and
    how many readings the source produced."""

    async def go() -> tuple[str, list]:
        server = FakeRasServer("2.29", job(comms))
        await server.start()
        source = CclRasSource(
            "ccl_ras",
            CclRasSourceConfig(
                addresses=[server.address], monitor=False, timeout=60.0, local_addresses=[HOST]
            ),
        )
        await source.start()
        try:
            return server.address, list(await source.poll())
        finally:
            await source.close()
            await server.stop()

    address, readings = asyncio.run(asyncio.wait_for(go(), timeout=240))
    good, bad = validate(readings)
    assert not bad, bad[:3]
    store = Store(mono=lambda: 10.0)
    store.put(Snapshot("ccl_ras", tuple(good), OK, 1.0, 2.0, 10.0, 0.1, 1e6))
    text = Exposition(store, process_metrics=False).render(None, None)[0].decode()
    return text, address, len(good)


def series(text: str, family: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(family + "{")]


def test_ten_thousand_communicators_keep_the_exposition_of_a_job_at_the_budget():
    at_budget, _, _ = scrape(budget.RAS_COMMS)
    text, address, produced = scrape(10_000)
    # The source produced every series; the store kept the budget's worth.
    assert produced > 250_000
    assert len(series(text, "accel_ccl_comm_ranks")) == budget.RAS_COMMS
    assert len(series(text, "accel_ccl_rank_collective_ops_total")) == budget.RAS_RANK_SERIES
    assert len(series(text, "accel_ccl_rank_device_info")) == budget.RAS_RANK_DEVICES
    # /metrics within its usual size: no bigger than a job the budget holds whole, but
    # for the dropped counters and the longer rank series kept (as a ratio).
    assert len(text) < 1.25 * len(at_budget)
    assert len(text) < 2_000_000
    dropped = "accel_exporter_series_dropped_total"
    assert value(text, dropped, source="ccl_ras", family="accel_ccl_comm_ranks") == (
        10_000 - budget.RAS_COMMS
    )
    assert value(text, dropped, source="ccl_ras", family="accel_ccl_comm_op_skew") == (
        10_000 * 5 - budget.RAS_COMM_COLLECTIVES
    )
    assert value(text, dropped, source="ccl_ras", family="accel_ccl_rank_collective_ops_total") == (
        (10_000 * RANKS - len(BAD)) * 5 - budget.RAS_RANK_SERIES  # a missing rank counts none
    )
    assert value(text, dropped, source="ccl_ras", family="accel_ccl_rank_device_info") == (
        10_000 * RANKS - budget.RAS_RANK_DEVICES  # answering and missing ranks alike
    )
    # Worst first: the communicators missing a rank are kept, and first; then by hash.
    kept = [line.split('comm="')[1].split('"')[0] for line in series(text, "accel_ccl_comm_ranks")]
    assert kept[:3] == [comm_label(i) for i in BAD]
    assert kept[3:] == [comm_label(i) for i in range(budget.RAS_COMMS - 3)]
    assert value(text, "accel_ccl_comm_missing_ranks", address=address, comm=comm_label(9500)) == 1
    # The job-level series are all there.
    assert value(text, "accel_ccl_communicators", address=address) == 10_000
