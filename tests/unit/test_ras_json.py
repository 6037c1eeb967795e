"""The JSON report parser: documented schema, derived job numbers, the 2.28.7/2.28.9 repair."""

from __future__ import annotations

import json

import pytest

from exporter.ccl.ras_model import RasParseError
from exporter.ccl.ras_parse import parse_json, parse_report, parse_text, repair_missing_commas
from tests.helpers.ras_reports import json_report, make_job, text_report

# The documented missing-rank sample (ras.rst, NCCL 2.29.1), completed with the header and
# footer the writer always prints.
DOCS_SAMPLE = """{
  "nccl_version": "2.29.1",
  "cuda_runtime_version": 12080,
  "cuda_driver_version": 12080,
  "timestamp": "2025-12-19 13:07:07",
  "communicators_count": 1,
  "communicators": [
    {
      "hash": "0xcf264af53edbe986",
      "secondary_hash": "0x1f2e3d4c5b6a7988:0x1234",
      "size": 2,
      "ranks_count": 1,
      "missing_ranks_count": 1,
      "ranks": [
        {
          "rank": 0,
          "host": "172.16.64.244",
          "pid": 1524344,
          "cuda_dev": 0,
          "nvml_dev": 0,
          "status": {
            "init_state": 0,
            "async_error": 0,
            "finalize_called": false,
            "destroy_flag": false,
            "abort_flag": false
          },
          "collective_counts": {
            "Broadcast": 0,
            "Reduce": 0,
            "AllGather": 12,
            "ReduceScatter": 0,
            "AllReduce": 4096
          }
        }
      ],
      "missing_ranks": [
        {
          "rank": 1,
          "host": "172.16.64.245",
          "pid": 1524345,
          "cuda_dev": 1,
          "nvml_dev": 1,
          "status": {
            "unresponsive": true,
            "considered_dead": false
          }
        }
      ]
    }
  ],
  "ras": {
    "collection_time_sec": 5.012,
    "timeouts_count": 1
  }
}
"""


def test_documented_sample():
    report = parse_json(DOCS_SAMPLE)
    assert report.format == "json" and report.library == "nccl" and report.version == "2.29.1"
    assert report.timestamp == "2025-12-19 13:07:07"
    (comm,) = report.communicators
    assert comm.hash_label == "cf264af53edbe986"
    assert comm.secondary_hash == "0x1f2e3d4c5b6a7988:0x1234"
    assert comm.size == 2 and comm.missing_count == 1 and comm.unresponsive_ranks == 1
    assert comm.ranks[0].counts["AllReduce"] == 4096
    assert comm.status == "RUNNING" and not comm.status_mismatch
    assert report.summary.nodes == 2 and report.summary.processes == 2 and report.summary.gpus == 2
    assert report.missing_process_count == 1 and report.dead_process_count == 0
    assert report.timeouts == 1 and report.collection_seconds == 5.012
    assert report.responding_hosts == {"172.16.64.244"}
    assert report.missing_hosts == {"172.16.64.245"}


def test_generated_healthy_world_and_node_comms():
    job = make_job(2, 8, node_comms=True)
    job.comms[0].ranks[3].counts[4] += 2
    report = parse_report(json_report(job))
    assert report.communicators_total == 3 and len(report.communicators) == 3
    world = report.communicators[0]
    assert world.hash_label == "3b2fe521bf43bc04" and world.size == 16
    assert world.op_skew()["AllReduce"] == 2 and world.op_skew()["Broadcast"] == 0
    assert (
        report.summary.nodes == 2 and report.summary.processes == 16 and report.summary.gpus == 16
    )
    assert report.has_rank_counts and report.running


def test_missing_comma_bug_is_repaired_to_the_same_model():
    job = make_job(2, 4)
    job.set_fate("10.0.0.2", 10005, "missing")
    job.set_fate("10.0.0.2", 10006, "dead")
    job.comms[0].ranks[7].fate = "nocomm"
    valid = json_report(job)
    buggy = json_report(job, missing_comma_bug=True)
    with pytest.raises(json.JSONDecodeError):
        json.loads(buggy)
    assert parse_json(buggy) == parse_json(valid)
    report = parse_json(buggy)
    (comm,) = report.communicators
    assert comm.missing_count == 3 and comm.unresponsive_ranks == 2
    assert comm.status_mismatch  # a NOCOMM rank next to RUNNING ones
    assert report.missing_process_count == 1 and report.dead_process_count == 1
    assert report.dead_processes[0].pid == 10006


def test_repair_leaves_valid_documents_alone():
    job = make_job(3, 8, node_comms=True)
    job.set_fate("10.0.0.3", 10020, "dead")
    valid = json_report(job)
    assert repair_missing_commas(valid) == valid
    assert repair_missing_commas(DOCS_SAMPLE) == DOCS_SAMPLE


def test_empty_arrays_as_the_writer_prints_them():
    job = make_job(1, 1)
    job.comms = []
    report = parse_json(json_report(job))
    assert report.communicators == () and report.communicators_total == 0
    assert report.summary is None and not report.running


def test_rccl_detected_from_the_hip_runtime_version():
    job = make_job(1, 2)
    report = parse_json(json_report(job, runtime=70226015))
    assert report.library == "rccl"


def test_both_formats_agree_on_the_same_job():
    job = make_job(2, 8)
    job.set_fate("10.0.0.2", 10012, "missing")
    job.comms[0].ranks[2].counts[1] += 7
    from_json = parse_report(json_report(job))
    from_text = parse_report(text_report(job))
    for field in ("missing_process_count", "dead_process_count", "communicators_total"):
        assert getattr(from_json, field) == getattr(from_text, field)
    assert from_json.summary == from_text.summary
    j, t = from_json.communicators[0], from_text.communicators[0]
    assert (j.hash, j.size, j.missing_count, j.status) == (
        t.hash,
        t.size,
        t.missing_count,
        t.status,
    )
    assert j.op_skew()["Reduce"] == t.op_skew()["Reduce"] == 7


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("communicators", "nope"),
        lambda d: d["communicators"][0].__setitem__("hash", "0xzz"),
        lambda d: d["communicators"][0].__setitem__("hash", "0x1" + "0" * 17),
        lambda d: d["communicators"][0]["ranks"][0].__setitem__("rank", "3"),
        lambda d: d["communicators"][0]["ranks"][0]["status"].__setitem__("abort_flag", 1),
        lambda d: d["communicators"][0]["ranks"][0]["collective_counts"].__setitem__("Reduce", -1),
        lambda d: d["communicators"][0]["ranks"][0].__delitem__("status"),
        lambda d: d.__delitem__("nccl_version"),
        lambda d: d.__setitem__("ras", []),
        lambda d: d["communicators"][0]["ranks"][0]["collective_counts"].__setitem__("a b", 1),
        lambda d: d["communicators"][0]["ranks"][0].__setitem__(
            "collective_counts", {f"C{i}": 0 for i in range(17)}
        ),
        # Numbers NCCL cannot print (%d / %ld / %lu): 2**64 and beyond, below -2**63.
        lambda d: d["communicators"][0]["ranks"][0]["collective_counts"].__setitem__(
            "AllReduce", 1 << 64
        ),
        lambda d: d["communicators"][0]["ranks"][0]["collective_counts"].__setitem__(
            "AllReduce", 10**400
        ),
        lambda d: d["ras"].__setitem__("timeouts_count", 10**400),
        lambda d: d["communicators"][0]["ranks"][0].__setitem__("pid", -(10**30)),
        lambda d: d["communicators"][0].__setitem__("size", 1 << 64),
        lambda d: d["ras"].__setitem__("collection_time_sec", 10**400),
        lambda d: d["ras"].__setitem__("collection_time_sec", float("inf")),
        lambda d: d["ras"].__setitem__("collection_time_sec", float("nan")),
    ],
)
def test_wrong_shapes_are_parse_errors(mutate):
    document = json.loads(json_report(make_job(1, 2)))
    mutate(document)
    with pytest.raises(RasParseError):
        parse_json(json.dumps(document, indent=2))


def test_not_json_or_not_an_object():
    for text in ("{", "[]", "{}", '{"nccl_version": "2.29.2"}', '{\n  "a": 1\n  "b": }'):
        with pytest.raises(RasParseError):
            parse_json(text)
    with pytest.raises(RasParseError):
        parse_text(DOCS_SAMPLE)


def test_largest_numbers_nccl_prints_are_accepted():
    document = json.loads(json_report(make_job(1, 2)))
    document["communicators"][0]["ranks"][0]["collective_counts"]["AllReduce"] = (1 << 64) - 1
    document["communicators"][0]["ranks"][0]["pid"] = -(1 << 63)
    document["ras"]["timeouts_count"] = (1 << 64) - 1
    report = parse_json(json.dumps(document, indent=2))
    assert report.communicators[0].op_range["AllReduce"] == (100, (1 << 64) - 1)
    assert report.timeouts == (1 << 64) - 1
