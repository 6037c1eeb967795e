"""Inspector records: parsing, bandwidth statistics, stragglers, bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.ccl.inspector import (
    MAX_COLLECTIVES,
    MAX_RECENT,
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
        assert all(len(recent) <= MAX_RECENT for recent in state.recent.values())


def _with(line: bytes, key: str, value: str) -> bytes:
    """``line`` with the number after ``"key":`` replaced by ``value`` (raw JSON text)."""
    head, _, rest = line.partition(f'"{key}":'.encode())
    assert rest, key
    end = min(i for i in (rest.find(b","), rest.find(b"}")) if i >= 0)
    return head + f'"{key}":{value}'.encode() + rest[end:]


@pytest.mark.parametrize(
    "key,value",
    [
        ("coll_exec_time_us", "1" + "0" * 400),
        ("coll_exec_time_us", str(1 << 64)),
        ("coll_msg_size_bytes", str(1 << 64)),
        ("coll_sn", str(1 << 70)),
        ("rank", str(1 << 64)),
        ("n_ranks", "1" + "0" * 30),
        ("coll_busbw_gbs", "1" + "0" * 400),
        ("coll_busbw_gbs", "1e400"),
        ("coll_busbw_gbs", "NaN"),
        ("coll_busbw_gbs", "-Infinity"),
    ],
)
def test_numbers_the_plugin_cannot_write_are_malformed(key, value):
    agg = InspectorAggregator(PEAK, 8)
    good = coll_line(COMM, 0, "AllReduce", 1, 1 << 20, 100)
    assert agg.add_line("f", _with(good, key, value)) == "malformed"
    assert agg.add_line("f", good) == "used"  # and the lines after it still count
    agg.finish()
    values = table(agg)
    assert values[("accel_ccl_inspector_lines_total", ("malformed",))] == 1


def test_largest_message_size_and_bucket_count():
    agg = InspectorAggregator(1e30, 8, max_series=1000)  # no record is implausible here
    for k in range(70):
        size = min(1 << k, (1 << 64) - 1)
        agg.add_line("f", coll_line(COMM, 0, "AllReduce", 10 + k, size, 100))
    values = table(agg)
    sizes = {labels[2] for (m, labels) in values if m == "accel_ccl_collective_duration_seconds"}
    # Powers of two up to 2**64: 65 buckets at most, each label at most 20 digits.
    assert len(sizes) == 65 and max(len(s) for s in sizes) == 20
    assert str(1 << 64) in sizes


def test_label_sets_are_capped_over_all_communicators_and_the_rest_counted():
    agg = InspectorAggregator(PEAK, max_comms=2, max_series=3)
    outcomes = [
        agg.add_line("f", coll_line(COMM, 0, "AllReduce", sn, 1 << sn, 100)) for sn in range(5)
    ]
    assert outcomes == ["used"] * 3 + ["series_limit"] * 2
    # A known label set still takes records.
    assert agg.add_line("f", coll_line(COMM, 0, "AllReduce", 9, 1, 100)) == "used"
    values = table(agg)
    label_sets = [k for k in values if k[0] == "accel_ccl_collective_duration_seconds"]
    assert len(label_sets) == 3
    assert values[("accel_ccl_inspector_lines_total", ("series_limit",))] == 2
    # Forgetting a communicator (max_comms) gives its label sets back.
    agg.add_line("f", coll_line(COMM + 1, 0, "AllReduce", 1, 1, 100))
    agg.add_line("f", coll_line(COMM + 2, 0, "AllReduce", 1, 1, 100))
    assert agg.add_line("f", coll_line(COMM + 2, 0, "AllReduce", 2, 2, 100)) == "used"


def test_sampled_dumps_compare_each_ranks_latest_in_the_batch():
    # NCCL 2.28.3-2.29.x / RCCL: each dump holds a rank's latest operation only, so the
    # two ranks' records never share a coll_sn and no group ever completes.
    agg = InspectorAggregator(PEAK, 8)
    label = f"{COMM:016x}"
    sn = {0: 1000, 1: 1003}
    for _ in range(3):
        for rank, time_us in ((0, 900), (1, 300)):
            for _ in range(2):
                sn[rank] += 7
                agg.add_line(
                    f"r{rank}", coll_line(COMM, rank, "AllReduce", sn[rank], 1 << 24, time_us)
                )
            # A small, latency-bound op in the same window is not what is compared.
            agg.add_line(f"r{rank}", coll_line(COMM, rank, "AllReduce", sn[rank] + 1, 64, 5))
            sn[rank] += 1
        agg.finish()
        values = table(agg)
    assert values[("accel_ccl_straggler_rank", (label,))] == 1
    assert values[("accel_ccl_straggler_sampled", (label,))] == 1
    assert values[("accel_ccl_collective_skew_ratio", (label, "AllReduce"))] == 3.0
    assert values[("accel_ccl_inspector_incomplete_groups_total", ())] > 0
    # Then NCCL 2.30+ ring dumps: every rank records every collective, groups complete.
    for sn_common in range(5000, 5003):
        for rank, time_us in ((0, 500), (1, 400)):
            agg.add_line(
                f"r{rank}", coll_line(COMM, rank, "AllReduce", sn_common, 1 << 24, time_us)
            )
    agg.finish()
    values = table(agg)
    assert values[("accel_ccl_straggler_sampled", (label,))] == 0
    assert values[("accel_ccl_collective_skew_ratio", (label, "AllReduce"))] == 1.25


def test_a_rank_one_dump_behind_is_not_incomplete():
    # Ring dumps read while one rank's latest dump is not written yet: its groups wait.
    agg = InspectorAggregator(PEAK, 8)
    for sn in range(1, 11):
        agg.add_line("r0", coll_line(COMM, 0, "AllReduce", sn, 1 << 20, 100))
        if sn <= 8:
            agg.add_line("r1", coll_line(COMM, 1, "AllReduce", sn, 1 << 20, 200))
    agg.finish()
    assert agg.incomplete_groups == 0 and list(agg._comms[COMM].recent[0]) == [9, 10]
    for sn in (9, 10):
        agg.add_line("r1", coll_line(COMM, 1, "AllReduce", sn, 1 << 20, 200))
    agg.finish()
    values = table(agg)
    assert agg.incomplete_groups == 0
    assert not any(agg._comms[COMM].recent.values())
    assert values[("accel_ccl_straggler_sampled", (f"{COMM:016x}",))] == 0


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        ["rank", "n_ranks", "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us", "coll_busbw_gbs"]
    ),
    st.one_of(
        st.integers(-(1 << 65), 1 << 66),
        st.integers(10**18, 10**400),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
)
def test_any_number_in_any_field_never_escapes(key, number):
    agg = InspectorAggregator(PEAK, 4)
    text = repr(number) if isinstance(number, float) else str(number)
    text = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text)
    line = _with(coll_line(COMM, 0, "AllReduce", 1, 1 << 20, 100), key, text)
    assert agg.add_line("f", line) in agg.outcomes
    agg.add_line("g", coll_line(COMM, 1, "AllReduce", 1, 1 << 20, 100))
    agg.finish()
    table(agg)


def test_files_read_one_after_the_other_still_match_and_dropped_ops_are_counted():
    # NCCL 2.30 ring dumps, a busy poll: thousands of collectives per file, read file by
    # file. The latest ones are matched exactly; one op rank 1's plugin did not write
    # (e.g. not GPU-timed there) is an incomplete group, and nothing is "sampled".
    agg = InspectorAggregator(PEAK, 8)
    count = 4 * MAX_RECENT
    for rank, time_us in ((0, 300), (1, 600)):
        for sn in range(count):
            if rank == 1 and sn == count - 10:
                continue
            agg.add_line(f"r{rank}", coll_line(COMM, rank, "AllReduce", sn, 1 << 20, time_us))
    agg.finish()
    values = table(agg)
    label = f"{COMM:016x}"
    assert values[("accel_ccl_straggler_rank", (label,))] == 0
    assert values[("accel_ccl_straggler_sampled", (label,))] == 0
    assert values[("accel_ccl_collective_skew_ratio", (label, "AllReduce"))] == 2.0
    assert values[("accel_ccl_inspector_incomplete_groups_total", ())] == 1
