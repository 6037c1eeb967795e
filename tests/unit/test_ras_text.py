"""The text report parser against real captures, documented excerpts and generated reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.ccl.ras_model import ANY_COLLECTIVE, RasParseError
from exporter.ccl.ras_parse import parse_report, parse_text
from tests.helpers.ras_reports import FakeRank, make_job, text_report

# Verbatim copies of shared/fixtures/rcclras (provenance in SOURCES.md there).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rcclras"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_real_healthy_capture():
    report = parse_text(fixture("rccl_v2283_text_healthy.txt"))
    assert (report.library, report.version) == ("rccl", "2.28.3")
    assert report.runtime_version == 70226015
    assert (report.summary.nodes, report.summary.processes, report.summary.gpus) == (1, 8, 8)
    assert report.communicators_total == 1
    (group,) = report.groups
    assert (group.comms, group.ranks_per_comm, group.ranks_in_group) == (1, 8, 8)
    assert group.status == "RUNNING" and group.errors == frozenset()
    assert report.communicators == ()
    assert report.missing_process_count == 0 and report.dead_process_count == 0
    assert report.collection_seconds == 0.0
    assert report.running and report.unparsed_lines == 0


def test_real_degraded_capture():
    report = parse_text(fixture("rccl_v2283_text_degraded.txt"))
    assert report.missing_process_count == 1
    (process,) = report.missing_processes
    assert (process.host, process.pid, process.gpus) == ("10.194.132.77", 3467978, "6")
    (comm,) = report.communicators
    assert comm.hash_label == "3b2fe521bf43bc04"
    assert comm.label == "#0-0" and comm.size == 8 and comm.missing_count == 1
    assert comm.unresponsive_ranks == 1
    (missing,) = comm.missing
    assert (missing.ref.rank, missing.ref.cuda_dev, missing.ref.pid) == (6, 6, 3467978)
    assert report.groups[0].ranks_per_node_min == 7
    assert report.missing_hosts == {"10.194.132.77"}
    assert report.unparsed_lines == 0


def test_generator_reproduces_the_real_captures_byte_for_byte():
    job = make_job(1, 8, library="rccl", version="2.28.3", base_ip="10.194.132.77")
    job.collection = 0.0
    assert text_report(job) == fixture("rccl_v2283_text_healthy.txt")
    for rank in job.comms[0].ranks:
        rank.pid = 3467972 + rank.rank
    job.set_fate("10.194.132.77", 3467978, "missing")
    # The capture's last newline was trimmed (see SOURCES.md).
    assert text_report(job) == fixture("rccl_v2283_text_degraded.txt") + "\n"


NCCL_2262_MISMATCH = """NCCL version 2.26.2 compiled with CUDA 12.6
CUDA runtime version 12060, driver version 12060

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4         8        32        32   RUNNING  MISMATCH

Errors
======

Warnings
========

#0-0 (fa93daea854b060b) MISMATCH
  Communicator ranks have different AllGather operation counts
  30 ranks have launched up to operation 640
  2 ranks have launched up to operation 641
  Rank 12 -- GPU 4 managed by process 323032 on node 10.137.190.124
  Rank 13 -- GPU 5 managed by process 323033 on node 10.137.190.124
"""


def test_real_nccl_2262_op_count_mismatch():
    # Verbatim from NVIDIA/nccl#1911 (a real 2.26.2 report).
    report = parse_text(NCCL_2262_MISMATCH)
    assert report.library == "nccl" and report.runtime_version == 12060
    (comm,) = report.communicators
    assert comm.hash_label == "fa93daea854b060b"
    assert comm.op_range == {"AllGather": (640, 641)}
    assert comm.op_skew() == {"AllGather": 1}
    assert not comm.status_mismatch and comm.missing_count == 0
    assert report.responding_hosts == {"10.137.190.124"}
    assert report.unparsed_lines == 0


DOCS_GROUPS = """NCCL version 2.26.2 compiled with CUDA 12.4
CUDA runtime version 12040, driver version 12040

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (0.01s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       1-2        32        32  FINALIZE  MISMATCH
    1         7         4         1         4        28   RUNNING      OK
    2         1         4         1         4         4      INIT      OK

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  The missing rank: 21

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data
"""


def test_documented_forms_ranges_dead_old_wording_timeout():
    report = parse_text(DOCS_GROUPS)
    assert [g.comms for g in report.groups] == [1, 7, 1]
    assert report.communicators_total == 9
    first = report.groups[0]
    assert (first.ranks_per_node_min, first.ranks_per_node_max) == (1, 2)
    assert first.status == "FINALIZE" and first.errors == {"MISMATCH"}
    assert report.groups[2].status == "INIT"
    assert report.dead_process_count == 1
    assert report.dead_processes[0].host == "172.16.64.213"
    (comm,) = report.communicators
    assert comm.size == 32 and comm.status == "FINALIZE"
    assert comm.missing_count == 1 and comm.missing[0].ref.rank == 21
    assert report.timeouts == 2
    assert report.collection_seconds == 0.01
    assert report.running
    assert report.unparsed_lines == 0


def test_no_communicator_data():
    text = fixture("rccl_v2283_text_healthy.txt")
    head, _, _ = text.partition("Group     Comms")
    report = parse_text(
        head + "No communicator data collected!\n\nErrors\n======\n\nWarnings\n========\n"
    )
    assert report.groups == () and report.communicators_total == 0
    assert not report.running


def test_summary_shape_processes_per_node_differ():
    job = make_job(3, 8)
    # One node runs only 4 processes: the distribution table plus totals, and an outlier line.
    job.comms[0].ranks = [
        r for r in job.comms[0].ranks if not (r.host == "10.0.0.3" and r.cuda_dev >= 4)
    ]
    text = text_report(job)
    assert "The outlier node:" in text and "per node  per process\n" in text
    report = parse_text(text)
    assert (report.summary.nodes, report.summary.processes, report.summary.gpus) == (3, 20, 20)
    assert report.unparsed_lines == 0


def test_summary_shape_gpus_per_process_differ():
    job = make_job(2, 4)
    # The second node's processes each drive two GPUs.
    extra = [FakeRank(100 + i, "10.0.0.2", 10004 + i, 4 + i) for i in range(4)]
    job.comms[0].ranks.extend(extra)
    text = text_report(job)
    assert "                    per process\n" in text
    report = parse_text(text)
    assert (report.summary.nodes, report.summary.processes, report.summary.gpus) == (2, 8, 12)
    assert report.unparsed_lines == 0


def test_errors_status_mismatch_and_counts_from_generated_report():
    job = make_job(2, 8)
    ranks = job.comms[0].ranks
    ranks[3].async_error = 6
    ranks[4].init_state = 3
    ranks[5].abort = True
    ranks[9].counts[4] += 5
    report = parse_text(text_report(job, verbose=False))
    (comm,) = report.communicators
    assert comm.init_error_ranks == 1 and comm.async_error_ranks == 1
    assert comm.status_mismatch
    assert comm.op_range["AllReduce"] == (100, 105)
    assert {"ERROR", "MISMATCH"} <= comm.errors
    assert report.responding_hosts == {"10.0.0.1", "10.0.0.2"}
    assert report.unparsed_lines == 0


def test_nocomm_ranks_count_as_missing_but_not_unresponsive():
    job = make_job(1, 8)
    job.comms[0].ranks[7].fate = "nocomm"
    report = parse_text(text_report(job))
    (comm,) = report.communicators
    assert comm.missing_count == 1 and comm.unresponsive_ranks == 0
    assert comm.status_mismatch
    assert [m.unresponsive for m in comm.missing] == [False]
    assert report.unparsed_lines == 0


def test_old_wording_one_count_over_every_collective():
    job = make_job(1, 8, version="2.24.3")
    job.comms[0].ranks[2].counts[0] += 3
    job.comms[0].ranks[7].fate = "nocomm"
    text = text_report(job, style="2.24")
    assert "different collective operation counts" in text and "UNKNOWN" in text
    report = parse_text(text)
    (comm,) = report.communicators
    assert set(comm.op_range) == {ANY_COLLECTIVE}
    assert comm.op_skew() == {ANY_COLLECTIVE: 3}
    assert comm.missing_count == 1
    assert report.unparsed_lines == 0


def test_many_missing_and_dead_processes_non_verbose():
    job = make_job(4, 8)
    for pid in range(10008, 10016):
        job.set_fate("10.0.0.2", pid, "missing")
    job.set_fate("10.0.0.3", 10016, "dead")
    report = parse_text(text_report(job, verbose=False))
    assert report.missing_process_count == 8 and len(report.missing_processes) == 8
    assert report.dead_process_count == 1
    (comm,) = report.communicators
    assert comm.missing_count == 9
    assert report.missing_hosts == {"10.0.0.2", "10.0.0.3"}


@pytest.mark.parametrize(
    "cut",
    ["\nCommunicators...", "Group     Comms", "\nErrors\n", "Warnings\n"],
)
def test_reports_cut_short_are_errors(cut):
    text = fixture("rccl_v2283_text_degraded.txt")
    with pytest.raises(RasParseError):
        parse_text(text[: text.index(cut) + len(cut) - 1])


def test_not_a_report():
    for garbage in ("", "hello\nworld\n", "ERROR: Unknown command STATUS\n", "SERVER PROTOCOL 2\n"):
        with pytest.raises(RasParseError):
            parse_report(garbage)


def test_unknown_lines_are_counted_not_fatal():
    text = (
        fixture("rccl_v2283_text_degraded.txt") + "\n\nNEWTHING\n  something a later NCCL prints\n"
    )
    report = parse_text(text)
    assert report.unparsed_lines == 2
    assert report.missing_process_count == 1


@pytest.mark.parametrize(
    "old,new",
    [
        ("Encountered 2 communication", "Encountered 1" + "0" * 400 + " communication"),
        ("Encountered 2 communication", "Encountered 18446744073709551616 communication"),
        ("launched up to operation 1207", "launched up to operation 1" + "0" * 25),
        ("Communicators... (0.01s)", "Communicators... (" + "9" * 400 + ".5s)"),
        ("from 1 rank", "from 99999999999999999999999 rank"),
    ],
)
def test_numbers_beyond_64_bits_are_parse_errors(old, new):
    job = make_job(2, 4, version="2.26.2")
    job.timeouts = 2
    job.collection = 0.01
    job.set_fate("10.0.0.2", 10005, "missing")
    job.comms[0].ranks[1].counts[4] = 1206
    for rank in job.comms[0].ranks:
        rank.counts[4] = 1207 if rank.rank != 1 else 1206
    good = text_report(job)
    assert old in good
    parse_text(good)
    with pytest.raises(RasParseError, match=r"64-bit|not a number"):
        parse_text(good.replace(old, new, 1))


def test_largest_count_nccl_prints_is_accepted():
    job = make_job(1, 4, version="2.26.2")
    job.timeouts = 2
    text = text_report(job).replace(
        "Encountered 2 communication", f"Encountered {(1 << 64) - 1} communication"
    )
    assert parse_text(text).timeouts == (1 << 64) - 1
