"""Job and communicator series from parsed reports: stable label sets across releases."""

from __future__ import annotations

import pytest

from exporter.ccl import ras_readings
from exporter.ccl.ras_parse import parse_report
from tests.helpers.ras_reports import json_report, make_job, text_report

WORLD = "3b2fe521bf43bc04"


def skews(report):
    return {
        r.labels[2]: r.value
        for r in ras_readings.job_readings("a", report)
        if r.metric == "accel_ccl_comm_op_skew" and r.labels[1] == WORLD
    }


@pytest.mark.parametrize("version", ["2.24.3", "2.25.1", "2.24.3+cuda12.6"])
def test_2_24_and_2_25_text_skew_is_always_any(version):
    # Named for a missing rank only (no count MISMATCH), then for a count MISMATCH:
    # the same one label set both times, no flipping to the five 2.26+ names.
    job = make_job(2, 4, version=version)
    job.set_fate("10.0.0.2", 10005, "missing")
    assert skews(parse_report(text_report(job, style="2.24"))) == {"Any": 0}
    job.set_fate("10.0.0.2", 10005, "ok")
    job.comms[0].ranks[1].counts[4] += 2
    assert skews(parse_report(text_report(job, style="2.24"))) == {"Any": 2}


def test_2_26_text_names_every_collective_and_json_what_it_counts():
    job = make_job(2, 4, version="2.26.2")
    job.set_fate("10.0.0.2", 10005, "missing")
    expected = dict.fromkeys(("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"), 0)
    assert skews(parse_report(text_report(job))) == expected
    job.set_fate("10.0.0.2", 10005, "ok")
    job.comms[0].ranks[1].counts[4] += 2
    assert skews(parse_report(text_report(job))) == {**expected, "AllReduce": 2}
    assert skews(parse_report(json_report(job))) == {**expected, "AllReduce": 2}
