"""The Inspector source on real files: growth, half-written lines, truncation, rotation, 1 GB."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from pathlib import Path

import pytest

from exporter.config.ccl import CclInspectorSourceConfig
from exporter.errors import SourceError
from exporter.sources.ccl_inspector import CclInspectorSource
from exporter.store import validate
from tests.helpers.inspector_lines import coll_line, p2p_line

COMM = 0xABCDEF0123
LABEL = f"{COMM:016x}"
GIB = 1 << 30


def make(tmp_path, **kwargs):
    kwargs.setdefault("dir", str(tmp_path))
    return CclInspectorSource("ccl_inspector", CclInspectorSourceConfig(**kwargs))


def poll(source):
    good, bad = validate(asyncio.run(source.poll()))
    assert not bad, bad
    return {(r.metric, r.labels): r.value for r in good}


def used(values):
    return values[("accel_ccl_inspector_lines_total", ("used",))]


def lines(rank, first, count, **kwargs):
    return b"".join(
        coll_line(COMM, rank, "AllReduce", sn, 1 << 20, 100 + rank, **kwargs)
        for sn in range(first, first + count)
    )


def test_missing_directory_is_normal(tmp_path):
    values = poll(make(tmp_path / "nope"))
    assert values[("accel_ccl_inspector_files", ())] == 0
    assert used(values) == 0


def test_a_file_where_the_directory_should_be_is_an_error(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SourceError) as err:
        asyncio.run(make(tmp_path, dir=str(target)).poll())
    assert err.value.reason == "read_error"


def test_growing_file_with_a_half_written_line(tmp_path):
    path = tmp_path / "node-a-pid1000.log"
    data = lines(0, 1, 3)
    cut = len(lines(0, 1, 2)) + 40
    path.write_bytes(data[:cut])
    source = make(tmp_path)
    assert used(poll(source)) == 2
    with path.open("ab") as fh:
        fh.write(data[cut:])
    values = poll(source)
    assert used(values) == 3
    assert values[("accel_ccl_inspector_lines_total", ("malformed",))] == 0
    hist = values[
        ("accel_ccl_collective_bus_bandwidth_bytes_per_second", (LABEL, "AllReduce", "1048576"))
    ]
    assert hist.count == 3


def test_truncation_rotation_removal_and_new_files(tmp_path):
    a = tmp_path / "node-a-pid1000.log"
    a.write_bytes(lines(0, 1, 5))
    source = make(tmp_path)
    assert used(poll(source)) == 5
    # A new process with the same pid truncates the file ("w" mode) and starts over.
    a.write_bytes(lines(0, 1, 2))
    assert used(poll(source)) == 7
    # Rotated away and recreated: a new inode under the old name is read from its start.
    a.rename(tmp_path / "node-a-pid1000.log.1")
    a.write_bytes(lines(0, 100, 3))
    values = poll(source)
    assert used(values) == 10 and values[("accel_ccl_inspector_files", ())] == 1
    b = tmp_path / "node-a-pid1001.log"
    b.write_bytes(lines(1, 100, 3) + p2p_line(COMM, 1, "Send", 1, 0, 4096, 10))
    values = poll(source)
    assert used(values) == 14 and values[("accel_ccl_inspector_files", ())] == 2
    assert values[("accel_ccl_straggler_rank", (LABEL,))] in (0, 1)
    a.unlink()
    values = poll(source)
    assert values[("accel_ccl_inspector_files", ())] == 1
    assert source.status()["files"] == ["node-a-pid1001.log"]


def test_copytruncate_and_refill_between_two_polls_loses_no_record(tmp_path):
    path = tmp_path / "node-a-pid1000.log"
    path.write_bytes(lines(0, 1, 5))
    source = make(tmp_path)
    assert used(poll(source)) == 5
    # logrotate's copytruncate: the same inode emptied in place, then the writer
    # goes on and writes more than was there before, all before the next poll.
    inode = path.stat().st_ino
    with path.open("r+b") as fh:
        fh.truncate(0)
    with path.open("ab") as fh:
        fh.write(lines(0, 6, 15))
    assert path.stat().st_ino == inode and path.stat().st_size > len(lines(0, 1, 5))
    values = poll(source)
    # All 15 new records, none skipped for lying below the old offset.
    assert used(values) == 20
    restarts = "accel_ccl_inspector_file_restarts_total"
    assert values[(restarts, ("truncated",))] == 1 and values[(restarts, ("replaced",))] == 0
    # Growth after that is read from where the refill ended, not counted again.
    with path.open("ab") as fh:
        fh.write(lines(0, 21, 2))
    values = poll(source)
    assert used(values) == 22 and values[(restarts, ("truncated",))] == 1


def test_a_refill_to_the_same_size_is_read_again(tmp_path):
    path = tmp_path / "node-a-pid1000.log"
    first = lines(0, 1, 12)
    path.write_bytes(first)
    source = make(tmp_path)
    assert used(poll(source)) == 12
    # Rewritten in place, past the fingerprint's 4 KiB, to exactly the same length:
    # neither the size nor the inode tells, the modification time does.
    again = lines(0, 7, 1) + lines(0, 2, 11)
    assert len(again) == len(first) > 4096
    with path.open("r+b") as fh:
        fh.write(again)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a coarse clock still moves
    values = poll(source)
    assert used(values) == 24
    assert values[("accel_ccl_inspector_file_restarts_total", ("truncated",))] == 1


def test_hostnames_filter_and_foreign_files(tmp_path):
    (tmp_path / "node-a-pid1.log").write_bytes(lines(0, 1, 1))
    (tmp_path / "node-b.example.com-pid2.log").write_bytes(lines(1, 1, 1))
    (tmp_path / "README").write_bytes(lines(2, 1, 1))
    assert used(poll(make(tmp_path))) == 2
    assert used(poll(make(tmp_path, hostnames=["node-b.example.com"]))) == 1


def test_overlong_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "h-pid1.log"
    path.write_bytes(lines(0, 1, 1) + b"{" + b"x" * 5000 + b"\n" + lines(0, 2, 1))
    values = poll(make(tmp_path, max_line_bytes=1024, max_read_bytes=1 << 20))
    assert used(values) == 2
    assert values[("accel_ccl_inspector_skipped_bytes_total", ())] >= 5000


def test_a_gigabyte_of_history_is_skipped_not_read(tmp_path):
    """A file with 1 GiB of backlog when following starts: skipped, counted, never read.

    The backlog is a sparse hole (it is never read, so its content does not matter);
    parsing real records at volume is the next test's subject.
    """
    path = tmp_path / "node-a-pid1000.log"
    with path.open("wb") as fh:
        fh.truncate(GIB)  # 1 GiB of history without a newline (sparse: quick to make)
        fh.seek(GIB)
        fh.write(b"\n" + lines(0, 1, 100))
    source = make(tmp_path, max_read_bytes=4 << 20)
    tracemalloc.start()
    try:
        values = poll(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert used(values) == 100
    assert values[("accel_ccl_inspector_skipped_bytes_total", ())] >= GIB - (4 << 20)
    assert peak < 32 << 20, peak


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# Real records appended while following: 256 MiB parsed (about 600,000 records) keeps
# this test near 20 s on a busy 2-core machine; a full GiB (~2.4 million records, over
# a minute of parsing) does not fit the suite's budget. What matters is the shape: the
# memory after hundreds of MB equals the memory after the first few.
APPENDED = 256 << 20
CHUNK = 8 << 20  # per file and poll, below max_read_bytes: every byte is parsed


@pytest.mark.slow  # a soak: minutes of parsing; the full run has it, --quick not
def test_hundreds_of_megabytes_of_real_records_keep_memory_flat(tmp_path):
    files = {rank: tmp_path / f"node-a-pid{1000 + rank}.log" for rank in (0, 1)}
    for path in files.values():
        path.write_bytes(b"")
    source = make(tmp_path, max_read_bytes=2 * CHUNK)
    sn = 0
    written = records = 0
    rss = []
    while written < APPENDED:
        # Both ranks record the same collectives (coll_sn), several ops and sizes.
        block = {rank: bytearray() for rank in files}
        start = sn
        while len(block[0]) < CHUNK:
            op = ("AllReduce", "AllGather", "ReduceScatter")[sn % 3]
            size = 1 << (12 + sn % 10)
            for rank in files:
                block[rank] += coll_line(
                    COMM, rank, op, sn, size, 100 + 7 * rank + sn % 13, pid=1000 + rank
                )
            sn += 1
        for rank, path in files.items():
            with path.open("ab") as fh:
                fh.write(block[rank])
            written += len(block[rank])
        records += 2 * (sn - start)
        del block
        values = poll(source)
        rss.append(rss_bytes())
    assert used(values) == records
    assert values[("accel_ccl_inspector_skipped_bytes_total", ())] == 0
    assert values[("accel_ccl_inspector_lines_total", ("malformed",))] == 0
    assert values[("accel_ccl_straggler_sampled", (LABEL,))] == 0
    assert values[("accel_ccl_inspector_incomplete_groups_total", ())] == 0
    # The first polls allocate the statistics; after that, hundreds of MB add nothing.
    baseline = max(rss[:3])
    assert max(rss[3:]) - baseline < 16 << 20, [r >> 20 for r in rss]


def refused(values, reason):
    return values[("accel_ccl_inspector_files_refused_total", (reason,))]


def test_a_symlink_is_refused_and_counted_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.log"
    secret.write_bytes(lines(0, 1, 3))
    watched = tmp_path / "dir"
    watched.mkdir()
    (watched / "node-a-pid1000.log").symlink_to(secret)
    source = make(tmp_path, dir=str(watched))
    values = poll(source)
    assert used(values) == 0 and values[("accel_ccl_inspector_files", ())] == 0
    assert refused(values, "symlink") == 1 and refused(values, "not_regular") == 0
    assert source.status()["files"] == []


def test_a_fifo_swapped_in_after_the_listing_is_refused_without_blocking(tmp_path):
    import threading

    fifo = tmp_path / "node-a-pid1000.log"
    regular = tmp_path / "other"
    regular.write_bytes(lines(0, 1, 1))
    os.mkfifo(fifo)
    source = make(tmp_path)
    # The listing saw a regular file; by the time it is opened, the name is a FIFO
    # (the race an fstat after a non-blocking open closes).
    st = os.stat(regular)
    source._tail._candidates = lambda stats: [(fifo.name, st)]
    result: list[dict] = []
    reader = threading.Thread(target=lambda: result.append(poll(source)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # blocked in open(): release it before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=5)
    assert result, "the poll blocked on a FIFO"
    assert refused(result[0], "not_regular") == 1 and used(result[0]) == 0
