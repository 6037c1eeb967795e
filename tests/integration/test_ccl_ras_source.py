"""The RAS source against fake servers: states, metrics, roles, stalls, faults."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from structlog.testing import capture_logs

from exporter.config.ccl import CclRasSourceConfig
from exporter.errors import SourceError
from exporter.sources.ccl_ras import CclRasSource
from exporter.store import validate
from tests.helpers.fake_ras import FakeRasServer, free_port
from tests.helpers.ras_reports import json_report, make_job, text_report


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def table(readings):
    good, bad = validate(readings)
    assert not bad, bad
    return {(r.metric, r.labels): r.value for r in good}


def state_of(values, address):
    on = [
        labels[1]
        for (metric, labels), v in values.items()
        if metric == "accel_ccl_job_state" and labels[0] == address and v == 1.0
    ]
    assert len(on) == 1, on
    return on[0]


def config(addresses, **kwargs):
    kwargs.setdefault("monitor", False)
    kwargs.setdefault("interval", 0.1)
    kwargs.setdefault("timeout", 5.0)
    kwargs.setdefault("local_addresses", ["10.0.0.1"])
    return CclRasSourceConfig(addresses=list(addresses), **kwargs)


async def poll(source):
    try:
        return table(await source.poll()), None
    except SourceError as exc:
        return table(exc.readings), exc


async def with_server(server, body, **kwargs):
    await server.start()
    source = CclRasSource("ccl_ras", config([server.address], **kwargs))
    await source.start()
    try:
        return await body(source, server)
    finally:
        await source.close()
        await server.stop()


async def from_second_node(job, body):
    """``body`` against a 2.29 server for ``job``, from 10.0.0.2: a follower by election."""
    server = FakeRasServer("2.29", job)
    return await with_server(
        server, body, local_addresses=["10.0.0.2"], interval=0.1, follower_interval=0.5
    )


def test_healthy_json_reporter_exports_job_comm_and_local_rank_series():
    job = make_job(2, 4, node_comms=True)

    async def body(source, server):
        values, error = await poll(source)
        assert error is None
        return values, server.address

    values, a = run(with_server(FakeRasServer("2.29", job), body))
    assert values[("accel_ccl_ras_up", (a,))] == 1
    assert state_of(values, a) == "healthy"
    assert values[("accel_ccl_job_info", (a, "nccl", "2.29.2"))] == 1
    assert values[("accel_ccl_ras_reporter", (a,))] == 1
    assert values[("accel_ccl_job_nodes", (a,))] == 2
    assert values[("accel_ccl_job_processes", (a,))] == 8
    assert values[("accel_ccl_job_gpus", (a,))] == 8
    assert values[("accel_ccl_job_missing_processes", (a,))] == 0
    assert values[("accel_ccl_communicators", (a,))] == 3
    assert values[("accel_ccl_comm_ranks", (a, "3b2fe521bf43bc04"))] == 8
    assert values[("accel_ccl_comm_ranks", (a, "0000000000100000"))] == 4
    assert values[("accel_ccl_comm_op_skew", (a, "3b2fe521bf43bc04", "AllReduce"))] == 0
    ranks = {
        labels for (metric, labels) in values if metric == "accel_ccl_rank_collective_ops_total"
    }
    # Only ranks on 10.0.0.1 (this node), each with five collectives, on two communicators.
    assert len(ranks) == 4 * 5 * 2
    assert (
        values[("accel_ccl_rank_collective_ops_total", (a, "3b2fe521bf43bc04", "0", "AllReduce"))]
        == 100
    )
    assert (
        "accel_ccl_rank_collective_ops_total",
        (a, "3b2fe521bf43bc04", "4", "AllReduce"),
    ) not in values
    assert values[("accel_ccl_ras_query_duration_seconds", (a,))].count == 1


@pytest.mark.parametrize("mode,expected", [("all", 8 * 5), ("none", 0), ("local", 4 * 5)])
def test_rank_series_modes(mode, expected):
    async def body(source, server):
        values, _ = await poll(source)
        return sum(1 for (m, _l) in values if m == "accel_ccl_rank_collective_ops_total")

    assert (
        run(with_server(FakeRasServer("2.29", make_job(2, 4)), body, rank_series=mode)) == expected
    )


def test_follower_exports_local_ranks_only_and_slows_down():
    async def body(source, server):
        values, _ = await poll(source)
        return values, server.address, source.interval(), source.stale_after

    values, a, interval, stale = run(
        with_server(
            FakeRasServer("2.29", make_job(2, 4)),
            body,
            local_addresses=["10.0.0.2"],
            follower_interval=60.0,
            rank_series="all",
        )
    )
    assert values[("accel_ccl_ras_reporter", (a,))] == 0
    assert ("accel_ccl_job_nodes", (a,)) not in values
    assert ("accel_ccl_communicators", (a,)) not in values
    ranks = {labels[2] for (m, labels) in values if m == "accel_ccl_rank_collective_ops_total"}
    assert ranks == {"4", "5", "6", "7"}
    assert state_of(values, a) == "healthy"
    assert interval == 60.0 and stale >= 180.0


def test_follower_takes_over_when_the_reporter_node_goes_missing():
    job = make_job(2, 4)

    async def body(source, server):
        await poll(source)
        assert source.interval() == 0.5
        for pid in range(10000, 10004):
            job.set_fate("10.0.0.1", pid, "missing")
        values, _ = await poll(source)
        return values, server.address, source.interval()

    values, a, interval = run(from_second_node(job, body))
    assert values[("accel_ccl_ras_reporter", (a,))] == 1 and interval == 0.1
    assert state_of(values, a) == "degraded"
    assert values[("accel_ccl_job_missing_processes", (a,))] == 4


def test_stall_detection_and_transitions():
    job = make_job(1, 4)

    async def body(source, server):
        states = []
        for i in range(5):
            if i == 1:
                job.advance(3)
            values, _ = await poll(source)
            states.append(state_of(values, server.address))
        job.advance(1)
        values, _ = await poll(source)
        states.append(state_of(values, server.address))
        return states, values, server.address

    states, values, a = run(with_server(FakeRasServer("2.29", job), body, stall_polls=2))
    # Polls 2 and 3 see the counts of poll 1 again: stalled from poll 3.
    assert states == ["healthy", "healthy", "healthy", "stalled", "stalled", "healthy"]
    assert values[("accel_ccl_job_state_transitions_total", (a, "healthy", "stalled"))] == 1
    assert values[("accel_ccl_job_state_transitions_total", (a, "stalled", "healthy"))] == 1
    assert values[("accel_ccl_job_last_progress_timestamp_seconds", (a,))] > 0


def test_no_job_is_a_normal_state():
    address = f"127.0.0.1:{free_port()}"

    async def go():
        source = CclRasSource("ccl_ras", config([address]))
        return await poll(source)

    values, error = run(go())
    assert error is None
    assert state_of(values, address) == "no_job"
    assert values[("accel_ccl_ras_up", (address,))] == 0
    assert ("accel_ccl_ras_query_duration_seconds", (address,)) not in values
    # No job, nothing to report on: `count(accel_ccl_ras_reporter == 1)` counts jobs' reporters.
    assert values[("accel_ccl_ras_reporter", (address,))] == 0


def test_job_ending_moves_to_no_job():
    async def go():
        server = await FakeRasServer("2.29", make_job(1, 2)).start()
        source = CclRasSource("ccl_ras", config([server.address]))
        first, _ = await poll(source)
        await server.stop()
        second, error = await poll(source)
        return first, second, error, server.address

    first, second, error, a = run(go())
    assert state_of(first, a) == "healthy" and state_of(second, a) == "no_job" and error is None
    assert second[("accel_ccl_job_state_transitions_total", (a, "healthy", "no_job"))] == 1
    assert ("accel_ccl_job_info", (a, "nccl", "2.29.2")) not in second
    assert first[("accel_ccl_ras_reporter", (a,))] == 1
    assert second[("accel_ccl_ras_reporter", (a,))] == 0


@pytest.mark.parametrize(
    "fault,state,reason",
    [
        ("stall", "unreachable", "timeout"),
        ("reset", "error", "connection_reset"),
        ("garbage", "error", "parse_error"),
        ("truncated", "error", "parse_error"),
    ],
)
def test_faults_fail_the_poll_with_readings(fault, state, reason):
    async def body(source, server):
        return await poll(source)

    values, error = run(
        with_server(FakeRasServer("2.26", make_job(1, 2), fault=fault), body, timeout=1.0)
    )
    assert error is not None and error.reason == state
    (a,) = {labels[0] for (m, labels) in values if m == "accel_ccl_ras_up"}
    assert state_of(values, a) == state
    assert values[("accel_ccl_job_state_reason_info", (a, reason))] == 1
    assert values[("accel_ccl_ras_up", (a,))] == 0


def test_one_bad_address_does_not_fail_the_others():
    async def go():
        good = await FakeRasServer("2.29", make_job(1, 2)).start()
        bad = await FakeRasServer("2.29", make_job(1, 2), fault="stall").start()
        idle = f"127.0.0.1:{free_port()}"
        source = CclRasSource("ccl_ras", config([good.address, bad.address, idle], timeout=1.0))
        try:
            return await poll(source), (good.address, bad.address, idle)
        finally:
            await good.stop()
            await bad.stop()

    (values, error), (good, bad, idle) = run(go())
    assert error is None
    assert [state_of(values, a) for a in (good, bad, idle)] == ["healthy", "unreachable", "no_job"]


def test_text_family_degraded_and_missing_comma_json():
    job = make_job(2, 4)
    job.set_fate("10.0.0.2", 10005, "dead")

    async def body(source, server):
        return (await poll(source))[0], server.address

    for family in ("2.24", "2.26", "2.28.9"):
        values, a = run(with_server(FakeRasServer(family, job), body))
        assert state_of(values, a) == "degraded", family
        assert values[("accel_ccl_job_dead_processes", (a,))] == 1
        assert values[("accel_ccl_comm_missing_ranks", (a, "3b2fe521bf43bc04"))] == 1
        assert values[("accel_ccl_job_state_reason_info", (a, "dead_processes"))] == 1


def test_another_protocol_number_is_served_and_logged_once():
    async def body(source, server):
        first = await poll(source)
        second = await poll(source)
        return first, second, server.address

    with capture_logs() as logs:
        (values, error), (_, again), a = run(
            with_server(FakeRasServer("2.29", make_job(1, 4), protocol="3"), body)
        )
    assert error is None and again is None
    assert state_of(values, a) == "healthy"
    noted = [e for e in logs if e.get("server_protocol")]
    assert [(e["log_level"], e["server_protocol"], e["address"]) for e in noted] == [
        ("warning", "3", a)
    ]


def test_a_job_degraded_at_the_first_query_is_logged():
    job = make_job(2, 4)
    job.set_fate("10.0.0.2", 10005, "dead")

    async def body(source, server):
        await poll(source)
        await poll(source)
        return server.address

    with capture_logs() as logs:
        a = run(with_server(FakeRasServer("2.29", job), body))
    lines = [e for e in logs if e["event"].startswith("ccl job state")]
    assert [(e["log_level"], e["state"], e["previous"], e["address"]) for e in lines] == [
        ("warning", "degraded", "", a)
    ]
    assert "dead_processes" in lines[0]["reasons"]


def test_monitor_events_are_counted():
    async def body(source, server):
        for _ in range(500):
            if server.monitoring:
                break
            await asyncio.sleep(0.01)
        server.emit("PEER_DEAD")
        server.emit("PEER_DEAD")
        server.emit("PEER_NEW")
        for _ in range(500):
            values, _ = await poll(source)
            if values.get(("accel_ccl_ras_events_total", (server.address, "PEER_NEW"))):
                return values, server.address
            await asyncio.sleep(0.01)
        raise AssertionError("events not counted")

    values, a = run(with_server(FakeRasServer("2.29", make_job(1, 2)), body, monitor=True))
    assert values[("accel_ccl_ras_events_total", (a, "PEER_DEAD"))] == 2
    assert values[("accel_ccl_ras_monitor_up", (a,))] == 1


def test_follower_address_waits_for_its_turn_next_to_a_reported_one():
    async def go():
        mine = await FakeRasServer("2.29", make_job(1, 2, base_ip="10.0.0.1")).start()
        theirs = await FakeRasServer("2.29", make_job(2, 2, base_ip="10.0.0.0")).start()
        source = CclRasSource(
            "ccl_ras",
            config([mine.address, theirs.address], interval=0.1, follower_interval=0.6),
        )
        try:
            await poll(source)
            assert source.interval() == 0.1
            for _ in range(3):
                await asyncio.sleep(0.1)
                await poll(source)
            counts = (mine.reports, theirs.reports)
            await asyncio.sleep(0.6)
            values, _ = await poll(source)
            return counts, (mine.reports, theirs.reports), values, theirs.address
        finally:
            await mine.stop()
            await theirs.stop()

    before, after, values, theirs = run(go())
    assert before == (4, 1) and after == (5, 2)
    # The follower's series are kept between its queries.
    assert state_of(values, theirs) == "healthy"


def _huge_counts(job):
    """The job's JSON with one op count beyond 64 bits (NCCL prints %lu)."""
    return json_report(job).replace('"AllReduce": 100', '"AllReduce": 1' + "0" * 400, 1)


def test_numbers_beyond_64_bits_fail_that_address_only_and_recover():
    job = make_job(2, 4, version="2.26.2")
    job.timeouts = 1
    good_text = text_report(job)
    bad_text = good_text.replace(
        "Encountered 1 communication timeout ",
        "Encountered 1" + "0" * 400 + " communication timeouts ",
    )
    assert bad_text != good_text

    async def go():
        text = await FakeRasServer("2.26", text=bad_text).start()
        js = FakeRasServer("2.29", make_job(1, 2), json_text=_huge_counts(make_job(1, 2)))
        await js.start()
        fine = await FakeRasServer("2.29", make_job(1, 2)).start()
        source = CclRasSource("ccl_ras", config([text.address, js.address, fine.address]))
        try:
            first, error = await poll(source)
            text.text = good_text
            js.json_text = json_report(make_job(1, 2))
            second, _ = await poll(source)
            return first, error, second, (text.address, js.address, fine.address)
        finally:
            for server in (text, js, fine):
                await server.stop()

    first, error, second, (text, js, fine) = run(go())
    assert error is None  # one healthy address keeps the source up
    assert [state_of(first, a) for a in (text, js, fine)] == ["error", "error", "healthy"]
    assert first[("accel_ccl_job_state_reason_info", (text, "parse_error"))] == 1
    assert first[("accel_ccl_job_state_reason_info", (js, "parse_error"))] == 1
    # Nothing was poisoned: the next good reports are judged normally.
    assert [state_of(second, a) for a in (text, js, fine)] == ["healthy"] * 3
    assert second[("accel_ccl_ras_timeouts_total", (text,))] == 1


class _Clumsy(CclRasSource):
    """A source whose judging fails for one address, standing in for any bug there."""

    victim = ""

    def _judge(self, entry, report):
        if entry.endpoint.label == self.victim:
            raise ZeroDivisionError("judging went wrong")
        return super()._judge(entry, report)


def test_an_unexpected_failure_judging_one_address_leaves_the_others_alone():
    async def go():
        one = await FakeRasServer("2.29", make_job(1, 2)).start()
        two = await FakeRasServer("2.29", make_job(1, 2)).start()
        source = _Clumsy("ccl_ras", config([one.address, two.address]))
        source.victim = one.address
        try:
            values, error = await poll(source)
            return values, error, source.status(), (one.address, two.address)
        finally:
            await one.stop()
            await two.stop()

    values, error, status, (one, two) = run(go())
    assert error is None
    assert state_of(values, one) == "error" and state_of(values, two) == "healthy"
    assert values[("accel_ccl_job_state_reason_info", (one, "internal_error"))] == 1
    assert "ZeroDivisionError" in status["addresses"][one]["detail"]
    assert values[("accel_ccl_comm_ranks", (two, "3b2fe521bf43bc04"))] == 2


async def _reporter_and_state(source):
    values, _ = await poll(source)
    (address,) = {labels[0] for (m, labels) in values if m == "accel_ccl_ras_up"}
    return values[("accel_ccl_ras_reporter", (address,))], state_of(values, address)


def test_a_text_report_naming_a_higher_node_does_not_demote_the_lowest_node():
    # The exporter runs on 10.0.0.1, the lowest node; the server speaks text only.
    job = make_job(2, 4, version="2.28.3")

    async def body(source, server):
        seen = [await _reporter_and_state(source)]
        job.comms[0].ranks[5].counts[4] -= 1  # rank 5 on 10.0.0.2 lags: a MISMATCH names it
        seen.append(await _reporter_and_state(source))
        job.comms[0].ranks[5].counts[4] += 1
        seen.append(await _reporter_and_state(source))
        job.set_fate("10.0.0.2", 10005, "dead")
        seen.append(await _reporter_and_state(source))
        return seen, source.interval()

    seen, interval = run(
        with_server(FakeRasServer("2.26", job), body, interval=0.1, follower_interval=0.5)
    )
    assert seen == [(1, "healthy"), (1, "healthy"), (1, "healthy"), (1, "degraded")]
    assert interval == 0.1


def test_a_json_election_does_not_outlive_the_json():
    # A follower by JSON (10.0.0.2 is not the lowest node); then the job behind the
    # address is one that speaks text only: nobody can be elected, so it reports.
    job = make_job(2, 4)

    async def body(source, server):
        first = await _reporter_and_state(source)
        server.family = "2.26"
        second = await _reporter_and_state(source)
        return first, second, source.interval()

    first, second, interval = run(from_second_node(job, body))
    assert first == (0, "healthy") and second == (1, "healthy") and interval == 0.1


def test_unreadable_json_falls_back_to_text_then_tries_json_again():
    job = make_job(2, 4)
    broken = json_report(job)[:-40] + "\n}garbage\n"

    async def body(source, server):
        formats = []
        for _ in range(3):
            values, _ = await poll(source)
            formats.append(
                (
                    source.status()["addresses"][server.address]["format"],
                    state_of(values, server.address),
                    values[("accel_ccl_ras_reporter", (server.address,))],
                )
            )
        server.json_text = None  # the server's JSON is fine again
        await asyncio.sleep(0.6)  # follower_interval: JSON is tried again
        values, _ = await poll(source)
        formats.append(
            (
                source.status()["addresses"][server.address]["format"],
                state_of(values, server.address),
                values[("accel_ccl_ras_reporter", (server.address,))],
            )
        )
        return formats

    async def go():
        server = FakeRasServer("2.29", job)
        await server.start()
        # First a good JSON report makes this exporter (10.0.0.2) a follower.
        source = CclRasSource(
            "ccl_ras",
            config([server.address], local_addresses=["10.0.0.2"], follower_interval=0.5),
        )
        try:
            await poll(source)
            server.json_text = broken
            return await body(source, server)
        finally:
            await source.close()
            await server.stop()

    formats = run(go())
    assert formats[0] == ("json", "error", 0)
    # Text meanwhile, and the JSON election (follower) holds while it stands in.
    assert formats[1] == ("text", "healthy", 0) and formats[2] == ("text", "healthy", 0)
    assert formats[3] == ("json", "healthy", 0)


def test_reading_this_nodes_addresses_never_blocks_the_event_loop(tmp_path):
    # /proc/net/fib_trie as a FIFO: opening it blocks until a writer comes, like a
    # stuck /proc read. The writer comes only once the event loop has ticked meanwhile.
    (tmp_path / "net").mkdir()
    fifo = tmp_path / "net" / "fib_trie"
    os.mkfifo(fifo)
    ticks = [0]
    seen = {}

    def writer():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:  # no reader yet
                time.sleep(0.005)
        else:
            return
        start = ticks[0]
        while ticks[0] < start + 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        seen["ticks_while_blocked"] = ticks[0] - start
        os.close(fd)

    async def go():
        server = await FakeRasServer("2.29", make_job(1, 2)).start()
        source = CclRasSource(
            "ccl_ras",
            CclRasSourceConfig(addresses=[server.address], monitor=False, interval=0.1),
            proc=str(tmp_path),
        )

        async def tick():
            while True:
                ticks[0] += 1
                await asyncio.sleep(0.005)

        ticker = asyncio.create_task(tick())
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            values, _ = await poll(source)
            return values, server.address
        finally:
            ticker.cancel()
            thread.join(timeout=40)
            await server.stop()

    values, address = run(go())
    assert seen["ticks_while_blocked"] >= 5
    assert state_of(values, address) == "healthy"


# -- rank to GPU ---------------------------------------------------------------------------


class FixedStore:
    """The device sources' data as the RAS source reads it from the store."""

    def __init__(self, readings):
        from exporter.store import View

        self._view = View(("fixed",), readings)

    def view(self):
        return self._view


def device_info(vendor, device, uuid):
    from exporter.catalog.device import INFO_LABELS
    from exporter.model import Reading

    labels = {"vendor": vendor, "device": device, "uuid": uuid}
    return Reading("accel_device_info", tuple(labels.get(k, "") for k in INFO_LABELS), 1.0)


def test_local_ranks_join_their_gpu_by_nvml_index_and_uuid():
    job = make_job(2, 4)
    for comm in job.comms:
        for rank in comm.ranks:
            rank.nvml_dev = 3 - rank.cuda_dev  # CUDA_VISIBLE_DEVICES reordered them
    job.set_fate("10.0.0.1", 10002, "missing")  # a stalled rank still names its GPU
    store = FixedStore(
        [device_info("nvidia", str(i), f"GPU-{i}") for i in range(4)]
        + [device_info("amd", "0", "amd-0")]
    )

    async def body(source, server):
        source.attach(store)
        values, _ = await poll(source)
        return values, server.address

    values, _ = run(with_server(FakeRasServer("2.29", job), body))
    joined = {
        labels[2:]: v for (m, labels), v in values.items() if m == "accel_ccl_rank_device_info"
    }
    # Ranks 0..3 run on this node (10.0.0.1); rank r uses CUDA device r, NVML index 3 - r.
    assert joined == {(str(r), str(3 - r), f"GPU-{3 - r}", str(10000 + r)): 1.0 for r in range(4)}
    comm = {labels[1] for (m, labels) in values if m == "accel_ccl_rank_device_info"}
    assert comm == {"3b2fe521bf43bc04"}


def test_rank_gpu_without_a_device_source_has_an_empty_uuid():
    async def body(source, server):
        values, _ = await poll(source)
        return values

    values = run(with_server(FakeRasServer("2.29", make_job(1, 2)), body))
    joined = sorted(labels[2:] for (m, labels) in values if m == "accel_ccl_rank_device_info")
    assert joined == [("0", "0", "", "10000"), ("1", "1", "", "10001")]


def test_ranks_neither_reported_nor_listed_count_as_missing():
    # As RCCL 2.28.9 reported it: size 8, 7 ranks, missing_ranks_count 1, no entry.
    import json

    document = json.loads(json_report(make_job(1, 8)))
    comm = document["communicators"][0]
    comm["ranks"] = comm["ranks"][:7]
    comm["ranks_count"] = 7
    comm["missing_ranks_count"] = 1
    text = json.dumps(document, indent=2)

    async def body(source, server):
        values, _ = await poll(source)
        return values, server.address

    values, a = run(with_server(FakeRasServer("2.29", make_job(1, 8), json_text=text), body))
    assert values[("accel_ccl_comm_ranks", (a, "3b2fe521bf43bc04"))] == 8
    assert values[("accel_ccl_comm_missing_ranks", (a, "3b2fe521bf43bc04"))] == 1
    assert state_of(values, a) != "healthy"
