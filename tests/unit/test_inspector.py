"""Inspector records: parsing, bandwidth statistics, stragglers, bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.ccl.inspector import (
    MAX_COLLECTIVES,
    InspectorAggregator,
    InspectorParseError,
    parse_record,
    size_bucket,
    straggler_of,
)
from exporter.store import validate
from tests.helpers.inspector_lines import coll_line, p2p_line

# Verbatim from NCCL's plugins/profiler/inspector/exporter/example/README.md (one line on disk).
DOCUMENTED = (
    b'{"header":{"id":"0x9e7a479f95a66c","rank":31,"n_ranks":32,"nnodes":4},'
    b'"metadata":{"inspector_output_format_version":"v4.0","git_rev":"75e61acda-dirty",'
    b'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1749490229087081,'
    b'"hostname":"example-hostname","pid":468528},'
    b'"coll_perf":{"coll":"ReduceScatter","coll_sn":129,"coll_msg_size_bytes":65536,'
    b'"coll_exec_time_us":110,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":19.065018,'
    b'"coll_busbw_gbs":18.469236}}'
)
COMM = 0x9E7A479F95A66C
PEAK = 1e12


def table(agg):
    good, bad = validate(agg.readings())
    assert not bad, bad
    return {(r.metric, r.labels): r.value for r in good}


def test_documented_record_and_our_writer_agree():
    record = parse_record(DOCUMENTED)
    assert (record.comm, record.rank, record.n_ranks) == (COMM, 31, 32)
    assert (record.kind, record.op, record.sn) == ("coll", "ReduceScatter", 129)
    assert (record.msg_bytes, record.exec_us, record.timing) == (65536, 110, "kernel_gpu")
    assert record.busbw_gbs == 18.469236
    ours = coll_line(
        COMM,
        31,
        "ReduceScatter",
        129,
        65536,
        110,
        n_ranks=32,
        nnodes=4,
        hostname="example-hostname",
        pid=468528,
    )
    assert ours.rstrip(b"\n") == DOCUMENTED


def test_p2p_records_and_other_kinds():
    record = parse_record(p2p_line(COMM, 1, "Send", 7, 2, 1 << 20, 100))
    assert (record.kind, record.op, record.sn, record.msg_bytes) == ("p2p", "Send", 7, 1 << 20)
    assert parse_record(b'{"header":{"id":"0x1"},"metadata":{}}') is None


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"{",
        b"[]",
        b'{"header":[]}',
        b'{"header":{"id":5}}',
        b'{"header":{"id":"0xzz"}}',
        b'{"header":{"id":"0x1","rank":-1,"n_ranks":2},"coll_perf":{"coll":"AllReduce",'
        b'"coll_sn":1,"coll_msg_size_bytes":1,"coll_exec_time_us":1,"coll_busbw_gbs":1}}',
        b'{"header":{"id":"0x1","rank":0,"n_ranks":2},"coll_perf":{"coll":"AllReduce"}}',
        b'{"header":{"id":"0x1","rank":0,"n_ranks":2},"coll_perf":"x"}',
        b"[" * 100000,
    ],
)
def test_malformed_lines(line):
    with pytest.raises(InspectorParseError):
        parse_record(line)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_lines_never_escape(line):
    agg = InspectorAggregator(PEAK, 4)
    assert agg.add_line("f", line) in agg.outcomes
    agg.finish()
    table(agg)


def test_size_buckets():
    assert [size_bucket(s) for s in (0, 1, 2, 3, 1024, 1025, 17179869184)] == [
        "0",
        "1",
        "2",
        "4",
        "1024",
        "2048",
        "17179869184",
    ]


def test_only_kernel_gpu_nonzero_plausible_records_count():
    agg = InspectorAggregator(PEAK, 8)
    lines = [
        coll_line(COMM, 0, "AllReduce", 1, 1 << 20, 50),
        coll_line(COMM, 0, "AllReduce", 1, 1 << 20, 50),  # the same record dumped again
        coll_line(COMM, 0, "AllReduce", 2, 1 << 20, 50, timing="collective_cpu"),
        coll_line(COMM, 0, "AllReduce", 3, 1 << 20, 0),
        coll_line(COMM, 0, "AllReduce", 3, 1 << 20, 0),
        coll_line(COMM, 0, "AllReduce", 4, 1 << 30, 1000, scale=10.0),  # RCCL 2.28.3's 10x
        b"not json",
    ]
    outcomes = [agg.add_line("f", line) for line in lines]
    assert outcomes == [
        "used",
        "duplicate",
        "not_kernel_gpu",
        "zero_time",
        "zero_time",
        "implausible",
        "malformed",
    ]
    values = table(agg)
    label = f"{COMM:016x}"
    hist = values[
        ("accel_ccl_collective_bus_bandwidth_bytes_per_second", (label, "AllReduce", "1048576"))
    ]
    assert hist.count == 1
    busbw = 2 * 7 / 8 * (1 << 20) / 50e-6
    assert hist.total == pytest.approx(busbw, rel=1e-6)
    duration = values[("accel_ccl_collective_duration_seconds", (label, "AllReduce", "1048576"))]
    assert duration.count == 1 and duration.total == pytest.approx(50e-6)
    assert values[("accel_ccl_rank_bus_bandwidth_bytes_per_second", (label, "0", "AllReduce"))] == (
        pytest.approx(busbw, rel=1e-6)
    )
    assert values[("accel_ccl_bandwidth_implausible", (label,))] == 1
    assert values[("accel_ccl_inspector_lines_total", ("malformed",))] == 1
    assert values[("accel_ccl_inspector_lines_total", ("used",))] == 1


def test_straggler_is_the_rank_furthest_from_the_median():
    # One rank arrives late: the others wait, its own kernel is the shortest.
    assert straggler_of({0: 900, 1: 905, 2: 300, 3: 910}) == (2, 910 / 300)
    # One rank is slow on the GPU: its kernel is the longest.
    assert straggler_of({0: 100, 1: 101, 2: 400, 3: 99})[0] == 2
    # Two ranks: the shorter kernel (the late arriver).
    assert straggler_of({0: 900, 1: 300}) == (1, 3.0)


def test_groups_complete_when_every_local_rank_reported():
    agg = InspectorAggregator(PEAK, 8)
    times = {0: 900, 1: 905, 2: 300, 3: 910}
    for rank, t in times.items():
        if rank != 3:
            agg.add_line(f"r{rank}", coll_line(COMM, rank, "AllReduce", 10, 1 << 24, t))
    agg.add_line("r3", coll_line(COMM, 3, "AllReduce", 9, 1 << 24, 500))
    agg.finish()
    values = table(agg)
    label = f"{COMM:016x}"
    # Rank 3 has not reported sn 10 yet, and sn 9 only came from rank 3.
    assert ("accel_ccl_straggler_rank", (label,)) not in values
    agg.add_line("r3", coll_line(COMM, 3, "AllReduce", 10, 1 << 24, times[3]))
    agg.finish()
    values = table(agg)
    assert values[("accel_ccl_straggler_rank", (label,))] == 2
    assert values[("accel_ccl_collective_skew_ratio", (label, "AllReduce"))] == pytest.approx(
        910 / 300
    )


def test_state_stays_bounded():
    agg = InspectorAggregator(PEAK, max_comms=3)
    for comm in range(10):
        for sn in range(400):
            agg.add_line("f", coll_line(comm + 1, 0, f"Op{sn % 40}", sn, sn + 1, 10))
    assert len(list(agg.comms())) == 3
    values = table(agg)
    ops = {labels[1] for (m, labels) in values if m == "accel_ccl_collective_duration_seconds"}
    assert len(ops) <= MAX_COLLECTIVES + 1 and "other" in ops
    for state in agg._comms.values():
        assert len(state.pending) <= 256
