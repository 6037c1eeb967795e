"""NCCL/RCCL sources end to end: the daemon subprocess against fake RAS servers and real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.daemon import samples, value
from tests.helpers.fake_ras import ThreadedFakeRas, free_port
from tests.helpers.inspector_lines import coll_line
from tests.helpers.promtool import check_metrics
from tests.helpers.ras_reports import make_job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rcclras"
WORLD = "3b2fe521bf43bc04"


def ras_config(addresses, **extra):
    section = {
        "addresses": addresses,
        "interval": "300ms",
        "timeout": "2s",
        "follower_interval": "600ms",
        "local_addresses": ["10.0.0.1"],
        "monitor": True,
    }
    section.update(extra)
    return {
        "sources": {
            "host": {"interval": "500ms"},
            "ccl_ras": section,
            "ccl_inspector": {"enabled": False},
        }
    }


def state(text, address):
    parsed = samples(text)
    on = [
        dict(labels)["state"]
        for (name, labels), v in parsed.items()
        if name == "accel_ccl_job_state" and dict(labels)["address"] == address and v == 1
    ]
    return on[0] if len(on) == 1 else None


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_every_release_family_through_the_daemon(daemon_factory):
    degraded = (FIXTURES / "rccl_v2283_text_degraded.txt").read_text()
    buggy = make_job(2, 4, version="2.28.9")
    buggy.set_fate("10.0.0.2", 10006, "missing")
    current = make_job(2, 4, node_comms=True)
    old = make_job(1, 4, version="2.24.3")
    old.comms[0].ranks[2].counts[4] += 2
    idle = f"127.0.0.1:{free_port()}"
    with (
        ThreadedFakeRas("2.24", old) as s24,
        ThreadedFakeRas("2.26", text=degraded) as s26,
        ThreadedFakeRas("2.28.9", buggy) as s289,
        ThreadedFakeRas("2.29", current) as s29,
    ):
        addresses = [s24.address, s26.address, s289.address, s29.address, idle]
        d = daemon_factory(ras_config(addresses))
        d.wait_for(
            lambda: all(state(d.metrics(), a) for a in addresses), what="every address judged"
        )
        text = d.metrics()
        assert [state(text, a) for a in addresses] == [
            "healthy",
            "degraded",
            "degraded",
            "healthy",
            "no_job",
        ]
        assert (
            value(text, "accel_ccl_job_info", address=s26.address, library="rccl", version="2.28.3")
            == 1
        )
        assert value(text, "accel_ccl_comm_missing_ranks", address=s26.address, comm=WORLD) == 1
        assert value(text, "accel_ccl_job_missing_processes", address=s26.address) == 1
        # 2.24/2.25 text counts every collective type as one ("Any").
        assert (
            value(text, "accel_ccl_comm_op_skew", address=s24.address, comm=WORLD, collective="Any")
            == 2
        )
        assert value(text, "accel_ccl_job_missing_processes", address=s289.address) == 1
        assert value(text, "accel_ccl_comm_ranks", address=s29.address, comm=WORLD) == 8
        assert value(text, "accel_ccl_communicators", address=s29.address) == 3
        assert (
            value(
                text,
                "accel_ccl_rank_collective_ops_total",
                address=s29.address,
                comm=WORLD,
                rank="0",
                collective="AllReduce",
            )
            == 100
        )
        assert value(text, "accel_ccl_ras_up", address=idle) == 0
        assert value(text, "accel_exporter_source_up", source="ccl_ras") == 1
        assert value(text, "accel_exporter_source_up", source="host") == 1
        check_metrics(text)
        # MONITOR only where the release has it (2.29+).
        d.wait_for(lambda: s29.monitoring, what="monitor connected")
        assert not s289.monitoring and not s26.monitoring
        status = d.status()["sources"]["ccl_ras"]["addresses"]
        assert status[s26.address]["format"] == "text"
        assert status[s289.address]["format"] == "json"


def test_stall_is_detected_and_clears(daemon_factory):
    job = make_job(1, 4)
    with ThreadedFakeRas("2.29", job) as server:
        d = daemon_factory(ras_config([server.address], stall_polls=2, monitor=False))
        d.wait_for(
            lambda: state(d.metrics(), server.address) == "stalled", timeout=30, what="stalled"
        )
        assert (
            value(
                d.metrics(),
                "accel_ccl_job_state_reason_info",
                address=server.address,
                reason="no_progress",
            )
            == 1
        )
        job.advance(10)
        d.wait_for(
            lambda: state(d.metrics(), server.address) == "healthy",
            timeout=30,
            what="healthy again",
        )
        text = d.metrics()
        assert (
            value(
                text,
                "accel_ccl_job_state_transitions_total",
                address=server.address,
                **{"from": "healthy", "to": "stalled"},
            )
            >= 1
        )
        changes = [e for e in d.events if e.get("event") == "ccl job state changed"]
        assert any(e["state"] == "stalled" and e["previous"] == "healthy" for e in changes)


@pytest.mark.parametrize(
    "fault,expected",
    [
        ("stall", "unreachable"),
        ("never_close", "unreachable"),
        ("reset", "error"),
        ("garbage", "error"),
        ("huge", "error"),
    ],
)
def test_faults_leave_the_daemon_and_other_sources_alone(daemon_factory, fault, expected):
    with ThreadedFakeRas("2.26", make_job(1, 4), fault=fault) as server:
        d = daemon_factory(ras_config([server.address], monitor=False, timeout="1s"))
        d.wait_for(
            lambda: state(d.metrics(), server.address) == expected,
            timeout=30,
            what=f"{fault} -> {expected}",
        )
        baseline = rss_kib(d.pid)
        polls = d.status()["sources"]["host"]["polls"]
        for _ in range(3):
            assert d.get("/healthz", timeout=5).status == 200
            assert value(d.metrics(timeout=5), "accel_exporter_source_up", source="host") == 1
        d.wait_for(
            lambda: d.status()["sources"]["host"]["polls"] >= polls + 2, what="host keeps polling"
        )
        d.wait_for(lambda: server.reports >= 3, timeout=40, what="more faulty reports")
        text = d.metrics()
        assert value(text, "accel_exporter_source_up", source="ccl_ras") == 0
        assert value(text, "accel_ccl_ras_up", address=server.address) == 0
        check_metrics(text)
        # Repeated 50 MB answers, stalls or resets do not accumulate memory.
        assert rss_kib(d.pid) < baseline + 100 * 1024


def test_follower_exports_no_job_series(daemon_factory):
    with ThreadedFakeRas("2.29", make_job(2, 4)) as server:
        d = daemon_factory(
            ras_config(
                [server.address], local_addresses=["10.0.0.2"], monitor=False, rank_series="local"
            )
        )
        d.wait_metric("accel_ccl_ras_reporter", 0, address=server.address)
        text = d.metrics()
        assert value(text, "accel_ccl_job_nodes", address=server.address) is None
        ranks = {
            dict(labels)["rank"]
            for (name, labels) in samples(text)
            if name == "accel_ccl_rank_collective_ops_total"
        }
        assert ranks == {"4", "5", "6", "7"}


def inspector_config(directory):
    return {
        "sources": {
            "host": {"interval": "500ms"},
            "ccl_ras": {"enabled": False},
            "ccl_inspector": {"dir": str(directory), "interval": "300ms"},
        }
    }


# Real records the daemon parses while following (two files, appended between polls).
APPEND_ROUNDS = 6
APPEND_CHUNK = 6 << 20  # per file and round, below the default max_read_bytes (8 MiB)


def test_inspector_backlog_skipped_then_real_records_parsed_in_flat_memory(
    daemon_factory, tmp_path
):
    """A 1 GiB backlog (a sparse hole: skipped, never read), then ~72 MiB of real records.

    The records are appended round after round while the daemon follows the files; the
    daemon's RSS after the last round stays within a few MB of the RSS after the first.
    """
    out = tmp_path / "inspector"
    out.mkdir()
    comm = 0x7F8C496AE9F661
    big = out / "node-a-pid1000.log"
    with big.open("wb") as fh:
        fh.truncate(1 << 30)
        fh.seek(1 << 30)
        fh.write(b"\n")
        for sn in range(50):
            fh.write(coll_line(comm, 0, "AllReduce", sn, 1 << 24, 900))
    small = out / "node-a-pid1001.log"
    records = b"".join(
        coll_line(comm, 1, "AllReduce", sn, 1 << 24, 300, pid=1001) for sn in range(50)
    )
    small.write_bytes(records[:-20])  # the last line is still being written
    d = daemon_factory(inspector_config(out))
    label = f"{comm:016x}"
    d.wait_metric("accel_ccl_inspector_lines_total", 99, outcome="used", timeout=30)
    with small.open("ab") as fh:
        fh.write(records[-20:])
    d.wait_metric("accel_ccl_inspector_lines_total", 100, outcome="used", timeout=30)
    text = d.metrics()
    assert value(text, "accel_ccl_straggler_rank", comm=label) == 1
    assert value(text, "accel_ccl_straggler_sampled", comm=label) == 0
    assert value(text, "accel_ccl_collective_skew_ratio", comm=label, collective="AllReduce") == 3
    assert (
        value(
            text,
            "accel_ccl_collective_bus_bandwidth_bytes_per_second_count",
            comm=label,
            collective="AllReduce",
            msg_size="16777216",
        )
        == 100
    )
    assert value(text, "accel_ccl_inspector_skipped_bytes_total") >= (1 << 30) - (8 << 20)
    skipped = value(text, "accel_ccl_inspector_skipped_bytes_total")
    # Now real records, round after round: every one parsed, memory flat.
    total, sn, rss = 100, 50, []
    for _ in range(APPEND_ROUNDS):
        blocks = {0: bytearray(), 1: bytearray()}
        while len(blocks[0]) < APPEND_CHUNK:
            size = 1 << (14 + sn % 8)
            for rank in blocks:
                blocks[rank] += coll_line(
                    comm, rank, "AllReduce", sn, size, 200 + 50 * rank, pid=1000 + rank
                )
            sn += 1
            total += 2
        for rank, path in ((0, big), (1, small)):
            with path.open("ab") as fh:
                fh.write(blocks[rank])
        d.wait_metric("accel_ccl_inspector_lines_total", total, outcome="used", timeout=60)
        rss.append(rss_kib(d.pid))
    text = d.metrics()
    assert value(text, "accel_ccl_inspector_skipped_bytes_total") == skipped
    assert value(text, "accel_ccl_inspector_incomplete_groups_total") == 0
    assert (
        value(text, "accel_ccl_collective_skew_ratio", comm=label, collective="AllReduce") == 1.25
    )
    assert value(text, "accel_exporter_source_up", source="ccl_inspector") == 1
    check_metrics(text)
    assert max(rss[1:]) - rss[0] < 16 * 1024, rss


def test_inspector_sampled_dumps_before_nccl_2_30(daemon_factory, tmp_path):
    """NCCL 2.28.3-2.29.x / RCCL: each dump holds each rank's latest operation only.

    The two ranks' records never share a coll_sn, so no collective is ever seen by both:
    the straggler and skew come from each rank's latest record per collective and size in
    the same poll (accel_ccl_straggler_sampled 1), and the collectives given up are
    counted. Histograms and per-rank bandwidth do not need matching and are complete.
    """
    out = tmp_path / "inspector"
    out.mkdir()
    comm = 0x1D2C3B4A59687
    label = f"{comm:016x}"
    files = {rank: out / f"node-b-pid{2000 + rank}.log" for rank in (0, 1)}
    d = daemon_factory(inspector_config(out))
    sn = {0: 100, 1: 103}
    written = 0
    for _ in range(3):
        for rank, path in files.items():
            with path.open("ab") as fh:
                for _ in range(2):  # two dumps between polls, each the latest op only
                    sn[rank] += 7
                    fh.write(
                        coll_line(
                            comm,
                            rank,
                            "AllGather",
                            sn[rank],
                            1 << 22,
                            (800, 200)[rank],
                            pid=2000 + rank,
                            hostname="node-b",
                        )
                    )
                    written += 1
        d.wait_metric("accel_ccl_inspector_lines_total", written, outcome="used", timeout=30)
    d.wait_for(
        lambda: value(d.metrics(), "accel_ccl_straggler_sampled", comm=label) == 1,
        timeout=30,
        what="sampled straggler",
    )
    text = d.metrics()
    # Rank 1 has the shorter kernel: it arrives last, the others wait for it.
    assert value(text, "accel_ccl_straggler_rank", comm=label) == 1
    assert value(text, "accel_ccl_collective_skew_ratio", comm=label, collective="AllGather") == 4
    assert value(text, "accel_ccl_inspector_incomplete_groups_total") > 0
    assert (
        value(
            text,
            "accel_ccl_collective_duration_seconds_count",
            comm=label,
            collective="AllGather",
            msg_size=str(1 << 22),
        )
        == written
    )
    for rank in ("0", "1"):
        assert (
            value(
                text,
                "accel_ccl_rank_bus_bandwidth_bytes_per_second",
                comm=label,
                rank=rank,
                collective="AllGather",
            )
            > 0
        )
    check_metrics(text)
