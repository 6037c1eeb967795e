"""Job state from reports: degraded reasons, stall detection across polls, reporter election."""

from __future__ import annotations

from exporter.ccl.hosts import _ipv4_local, _ipv6_local, local_addresses, lowest_host, normalize
from exporter.ccl.ras_parse import parse_report
from exporter.ccl.ras_state import (
    ProgressTracker,
    StateMachine,
    classify,
    elect_reporter,
    fingerprint,
)
from tests.helpers.ras_reports import json_report, make_job, text_report


def both(job):
    return parse_report(json_report(job)), parse_report(text_report(job))


def test_healthy_and_degraded_reasons_in_both_formats():
    job = make_job(2, 4)
    for report in both(job):
        assert classify(report, stalled=False) == ("healthy", [])
    job.set_fate("10.0.0.2", 10005, "missing")
    for report in both(job):
        state, reasons = classify(report, stalled=False)
        assert state == "degraded"
        assert {"missing_processes", "missing_ranks"} <= set(reasons)
    job.set_fate("10.0.0.2", 10005, "dead")
    for report in both(job):
        assert "dead_processes" in classify(report, stalled=False)[1]


def test_errors_aborts_and_status_mismatch_degrade():
    job = make_job(1, 8)
    job.comms[0].ranks[1].async_error = 2
    for report in both(job):
        assert "nccl_errors" in classify(report, False)[1]
    job = make_job(1, 8)
    job.comms[0].ranks[1].abort = True
    for report in both(job):
        reasons = classify(report, False)[1]
        assert "aborted" in reasons and "status_mismatch" in reasons
    # In-progress init (7) is normal, not an error.
    job = make_job(1, 8)
    for rank in job.comms[0].ranks:
        rank.init_state = 7
    for report in both(job):
        assert classify(report, False) == ("healthy", [])


def test_op_count_mismatch_alone_is_healthy():
    job = make_job(1, 8)
    job.comms[0].ranks[3].counts[4] += 1
    for report in both(job):
        assert classify(report, False) == ("healthy", [])


def test_stall_needs_unchanged_counts_for_stall_polls_polls_json():
    job = make_job(2, 4)
    tracker = ProgressTracker(stall_polls=3)
    results = []
    for poll in range(6):
        if poll == 1:
            job.advance(5)
        results.append(tracker.observe(parse_report(json_report(job)), now=1000.0 + poll))
    # polls 2, 3, 4 are unchanged after the move at poll 1 -> stalled from poll 4 on.
    assert results == [False, False, False, False, True, True]
    assert tracker.last_progress == 1001.0
    job.advance(1, skip={0})  # any rank moving is progress
    assert tracker.observe(parse_report(json_report(job)), now=2000.0) is False


def test_stall_from_text_needs_a_persisting_mismatch():
    job = make_job(2, 4)
    tracker = ProgressTracker(stall_polls=2)
    # All ranks in step: text carries no counts, so progress cannot be judged.
    for _ in range(4):
        assert not tracker.observe(parse_report(text_report(job)), now=0.0)
    job.comms[0].ranks[5].counts[4] -= 3  # one rank behind, forever
    states = [tracker.observe(parse_report(text_report(job)), now=0.0) for _ in range(3)]
    assert states == [False, False, True]
    job.comms[0].ranks[5].counts[4] += 1  # it moved
    assert not tracker.observe(parse_report(text_report(job)), now=0.0)


def test_not_running_is_never_stalled():
    job = make_job(1, 4)
    for rank in job.comms[0].ranks:
        rank.finalize = True
    tracker = ProgressTracker(stall_polls=1)
    assert [tracker.observe(parse_report(json_report(job)), 0.0) for _ in range(3)] == [False] * 3
    assert fingerprint(parse_report(json_report(job))) == ()


def test_stalled_wins_over_degraded_and_keeps_reasons():
    job = make_job(1, 4)
    job.set_fate("10.0.0.1", 10001, "missing")
    state, reasons = classify(parse_report(json_report(job)), stalled=True)
    assert state == "stalled" and reasons[0] == "no_progress" and "missing_ranks" in reasons


def test_election_lowest_responding_host():
    job = make_job(3, 2, base_ip="10.0.0.9")
    report = parse_report(json_report(job))
    assert lowest_host(report.responding_hosts) == "10.0.0.9"
    assert elect_reporter(report, {"10.0.0.9"}) is True
    assert elect_reporter(report, {"10.0.0.10", "127.0.0.1"}) is False
    # The reporter's node goes missing: the next one takes over.
    job.set_fate("10.0.0.9", 10000, "missing")
    job.set_fate("10.0.0.9", 10001, "dead")
    report = parse_report(json_report(job))
    assert elect_reporter(report, {"10.0.0.10"}) is True
    # A healthy text report names no node: nobody can be elected from it.
    assert elect_reporter(parse_report(text_report(make_job(2, 2))), {"10.0.0.1"}) is None


def test_text_reports_never_elect_even_when_they_name_nodes():
    job = make_job(2, 4)
    job.comms[0].ranks[5].counts[4] -= 1  # a transient lag on 10.0.0.2, named in a MISMATCH
    text = parse_report(text_report(job))
    assert "10.0.0.2" in text.responding_hosts
    assert elect_reporter(text, {"10.0.0.1"}) is None
    assert elect_reporter(text, {"10.0.0.2"}) is None
    # The same job in JSON elects the lowest node.
    assert elect_reporter(parse_report(json_report(job)), {"10.0.0.1"}) is True


def test_address_order_is_numeric_ipv4_first():
    assert lowest_host(["10.0.0.10", "10.0.0.9", "::1", "9.255.0.1"]) == "9.255.0.1"
    assert lowest_host(["fd00::2", "fd00::10"]) == "fd00::2"
    assert normalize("::ffff:10.1.2.3") == "10.1.2.3" and normalize("[::1]") == "::1"


def test_state_machine_counts_transitions():
    machine = StateMachine()
    assert machine.move("no_job") is None
    assert machine.move("healthy") == "no_job"
    assert machine.move("healthy") is None
    assert machine.move("stalled") == "healthy"
    assert machine.move("healthy") == "stalled"
    assert machine.move("stalled") == "healthy"
    assert machine.transitions == {
        ("no_job", "healthy"): 1,
        ("healthy", "stalled"): 2,
        ("stalled", "healthy"): 1,
    }


def test_local_addresses_from_proc(tmp_path):
    net = tmp_path / "net"
    net.mkdir()
    (net / "fib_trie").write_text(
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.1.2.3\n        /32 host LOCAL\n"
        "     |-- 10.1.2.255\n        /32 link BROADCAST\n     |-- 127.0.0.1\n"
        "        /32 host LOCAL\n"
    )
    (net / "if_inet6").write_text(
        "fd000000000000000000000000000002 04 40 00 82     eth0\n"
        "00000000000000000000000000000001 01 80 10 80       lo\n"
    )
    assert local_addresses(str(tmp_path)) == {"10.1.2.3", "127.0.0.1", "fd00::2", "::1"}
    assert _ipv4_local("garbage\n/32 host LOCAL\n") == set()
    assert _ipv6_local("zz\n") == set()
    # This machine's real addresses include loopback.
    assert "127.0.0.1" in local_addresses()
