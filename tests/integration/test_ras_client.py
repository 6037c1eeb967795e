"""The asyncio RAS client against a fake server speaking each release family and misbehaving."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from exporter.ccl.ras_client import (
    Endpoint,
    QueryOptions,
    RasClientError,
    monitor,
    query,
)
from exporter.ccl.ras_parse import RasParseError, parse_report
from tests.helpers.fake_ras import FakeRasServer, free_port
from tests.helpers.ras_reports import make_job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rcclras"
OPTIONS = QueryOptions(deadline=15.0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def ask(server: FakeRasServer, options: QueryOptions = OPTIONS):
    await server.start()
    try:
        return await query(Endpoint.parse(server.address), options)
    finally:
        await server.stop()


def degraded_job():
    job = make_job(2, 4)
    job.set_fate("10.0.0.2", 10006, "missing")
    return job


def test_text_family_falls_back_on_the_same_connection():
    server = FakeRasServer("2.26", degraded_job())
    response = run(ask(server))
    assert response.format == "text"
    assert server.connections == 1
    assert server.commands == [
        "CLIENT PROTOCOL 2",
        "TIMEOUT 5",
        "SET FORMAT json",
        "VERBOSE STATUS",
    ]
    report = parse_report(response.body)
    assert report.format == "text" and report.missing_process_count == 1


def test_old_family_text_only():
    server = FakeRasServer("2.24", degraded_job())
    response = run(ask(server, QueryOptions(deadline=5.0, verbose=False)))
    assert response.format == "text" and server.commands[-1] == "STATUS"
    assert parse_report(response.body).version == "2.29.2"


def test_json_family_with_the_missing_comma_bug():
    server = FakeRasServer("2.28.9", degraded_job())
    response = run(ask(server))
    assert response.format == "json"
    report = parse_report(response.body)
    assert report.format == "json" and report.communicators[0].missing_count == 1


def test_json_family_current():
    job = degraded_job()
    job.version = "2.29.2"
    response = run(ask(FakeRasServer("2.29", job)))
    assert response.format == "json" and parse_report(response.body).version == "2.29.2"


def test_format_text_sends_no_set_format():
    server = FakeRasServer("2.29", degraded_job())
    response = run(ask(server, QueryOptions(deadline=5.0, format="text")))
    assert response.format == "text"
    assert not any(c.upper().startswith("SET FORMAT") for c in server.commands)


def test_format_json_on_an_old_server_is_an_error():
    with pytest.raises(RasClientError) as err:
        run(ask(FakeRasServer("2.26", degraded_job()), QueryOptions(deadline=5.0, format="json")))
    assert (err.value.state, err.value.reason) == ("error", "json_unsupported")


def test_replays_a_real_capture_byte_for_byte():
    text = (FIXTURES / "rccl_v2283_text_degraded.txt").read_text()
    response = run(ask(FakeRasServer("2.26", text=text, collective_delay=0.2)))
    assert response.body.decode() == text


def test_nothing_listening_is_no_job():
    endpoint = Endpoint.parse(f"127.0.0.1:{free_port()}")
    with pytest.raises(RasClientError) as err:
        run(query(endpoint, OPTIONS))
    assert (err.value.state, err.value.reason) == ("no_job", "connection_refused")


@pytest.mark.parametrize("fault", ["stall", "never_close", "silent"])
def test_stuck_servers_are_unreachable_within_the_deadline(fault):
    started = time.monotonic()
    with pytest.raises(RasClientError) as err:
        run(ask(FakeRasServer("2.29", degraded_job(), fault=fault), QueryOptions(deadline=1.0)))
    assert (err.value.state, err.value.reason) == ("unreachable", "timeout")
    assert time.monotonic() - started < 30


def test_reset_mid_report_is_an_error():
    with pytest.raises(RasClientError) as err:
        run(ask(FakeRasServer("2.26", degraded_job(), fault="reset")))
    assert (err.value.state, err.value.reason) == ("error", "connection_reset")


def test_garbage_and_truncated_reports_fail_to_parse():
    for fault in ("garbage", "truncated"):
        response = run(ask(FakeRasServer("2.26", degraded_job(), fault=fault)))
        with pytest.raises(RasParseError):
            parse_report(response.body)


def test_bad_handshake_is_a_protocol_error():
    with pytest.raises(RasClientError) as err:
        run(ask(FakeRasServer("2.29", degraded_job(), fault="bad_handshake")))
    assert (err.value.state, err.value.reason) == ("error", "protocol_error")


def test_50_megabytes_hit_the_size_cap():
    with pytest.raises(RasClientError) as err:
        run(
            ask(
                FakeRasServer("2.26", degraded_job(), fault="huge"),
                QueryOptions(deadline=30.0, max_bytes=1024 * 1024),
            )
        )
    assert (err.value.state, err.value.reason) == ("error", "too_large")


def test_one_connection_per_report():
    async def go():
        server = await FakeRasServer("2.29", degraded_job()).start()
        try:
            endpoint = Endpoint.parse(server.address)
            for _ in range(3):
                await query(endpoint, OPTIONS)
            return server.connections, server.reports
        finally:
            await server.stop()

    assert run(go()) == (3, 3)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")
@pytest.mark.parametrize("listen", ["::1", "127.0.0.1"])
def test_localhost_tries_every_resolved_address(listen):
    async def go():
        server = await FakeRasServer("2.29", degraded_job(), host=listen).start()
        port = server.port

        async def resolver(host, _port):
            assert host == "localhost"
            # What getaddrinfo("localhost") gives on distros that list ::1 first.
            return [(socket.AF_INET6, ("::1", port, 0, 0)), (socket.AF_INET, ("127.0.0.1", port))]

        try:
            return await query(Endpoint.parse(f"localhost:{port}"), OPTIONS, resolver)
        finally:
            await server.stop()

    response = run(go())
    assert response.peer == (
        f"[::1]:{response.peer.rsplit(':', 1)[1]}"
        if listen == "::1"
        else f"127.0.0.1:{response.peer.rsplit(':', 1)[1]}"
    )


def test_real_localhost_resolution():
    async def go():
        server = await FakeRasServer("2.29", degraded_job(), host="127.0.0.1").start()
        try:
            return await query(Endpoint.parse(f"localhost:{server.port}"), OPTIONS)
        finally:
            await server.stop()

    assert run(go()).format == "json"


def test_monitor_stream_json_and_text():
    async def go(family, fmt_expected):
        server = await FakeRasServer(family, degraded_job()).start()
        events = []
        connected = asyncio.Event()
        task = asyncio.create_task(
            monitor(
                Endpoint.parse(server.address),
                events.append,
                on_connected=lambda peer: connected.set(),
            )
        )
        try:
            await asyncio.wait_for(connected.wait(), 10)
            while server.monitoring == 0:
                await asyncio.sleep(0.01)
            server.emit("PEER_DEAD", "10.0.0.2", 10006)
            server.emit("PEER_UNRESPONSIVE", "10.0.0.2", 10006, details='oops "quoted"')
            for _ in range(500):
                if len(events) >= 2:
                    break
                await asyncio.sleep(0.01)
        finally:
            await server.stop()
            malformed = await asyncio.wait_for(task, 10)
        assert "MONITOR all" in server.commands
        return events, malformed

    events, malformed = run(go("2.29", "json"))
    assert [e.event for e in events] == ["PEER_DEAD", "PEER_UNRESPONSIVE"]
    assert events[0].host == "10.0.0.2" and events[0].pid == 10006
    assert malformed == 0


def test_monitor_unsupported_before_2292():
    async def go():
        server = await FakeRasServer("2.28.9", degraded_job()).start()
        try:
            await monitor(Endpoint.parse(server.address), lambda e: None)
        finally:
            await server.stop()

    with pytest.raises(RasClientError) as err:
        run(go())
    assert err.value.reason == "unsupported"


def test_leg_timeout_fits_the_deadline():
    assert QueryOptions(deadline=15).leg_timeout == 5
    assert QueryOptions(deadline=9).leg_timeout == 3
    assert QueryOptions(deadline=1).leg_timeout == 1


def test_endpoint_parsing():
    assert Endpoint.parse("localhost") == Endpoint("localhost", "localhost", 28028)
    assert Endpoint.parse("[::1]:29000").host == "::1"
    for bad in ("", ":28028", "::1:28028", "host:99999", "host:0", "[::1]:0"):
        with pytest.raises(ValueError):
            Endpoint.parse(bad)
