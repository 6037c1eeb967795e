"""An idle daemon's threads sleep until they have something to do (issue 39).

A BlockingCall keeps one thread for calls that come often and none for rare ones; the
HTTP reaper sleeps until the earliest deadline, not on a fixed tick; the listener's
thread sleeps until a connection or its stop.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time

import pytest

from exporter.config.web import WebConfig
from exporter.errors import SourceError
from exporter.outputs import http_conns
from exporter.outputs.http import Endpoints, HttpServer
from exporter.outputs.http_conns import AUTH_FAILURES, Connections, HttpCounters
from exporter.outputs.prometheus import Exposition
from exporter.sources import base
from exporter.sources.base import BlockingCall
from exporter.store import Store


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_calls_share_one_thread_which_ends_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "THREAD_IDLE_SECONDS", 0.3)
    call = BlockingCall("idle-test")

    async def run() -> None:
        # The threads themselves are kept (an ident can be reused once a thread ends).
        ran_on = [await call(threading.current_thread) for _ in range(5)]
        assert all(thread is ran_on[0] for thread in ran_on)
        assert len(_threads("poll-idle-test")) == 1
        deadline = time.monotonic() + 5
        while _threads("poll-idle-test") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not _threads("poll-idle-test")
        # A call after the thread ended starts another.
        assert await call(lambda: "again") == "again"

    asyncio.run(run())


def test_a_hung_call_still_fails_the_next_fast() -> None:
    call = BlockingCall("hung-test")
    release = threading.Event()

    async def run() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call(release.wait, 10), timeout=0.1)
        with pytest.raises(SourceError) as info:
            await call(lambda: None)
        assert info.value.reason == "timeout"
        release.set()

    asyncio.run(run())


def test_reaper_has_nothing_to_wake_for_without_connections() -> None:
    conns = Connections(WebConfig(), HttpCounters(), publish=lambda _: None)
    with conns._lock:
        assert conns.next_wake() == 0.0  # the counters (all zero) are published first
    conns.publish()
    with conns._lock:
        assert conns.next_wake() is None


def test_reaper_wakes_for_the_earliest_deadline_and_for_counts_to_publish() -> None:
    now = [100.0]
    counters = HttpCounters()
    conns = Connections(WebConfig(), counters, publish=lambda _: None, clock=lambda: now[0])
    conns.publish()
    a, b = socket.socketpair()
    try:
        conn = conns.admit(a)
        assert conn is not None
        with conns._lock:
            assert conns.next_wake() == pytest.approx(WebConfig().header_timeout)
        counters.add(AUTH_FAILURES, "missing")
        with conns._lock:
            assert conns.next_wake() == pytest.approx(
                min(WebConfig().header_timeout, http_conns.PUBLISH_EVERY)
            )
        conns.release(conn)
        conns.publish()
        with conns._lock:
            assert conns.next_wake() is None
    finally:
        a.close()
        b.close()


def test_reaper_closes_a_connection_at_its_deadline() -> None:
    """Sleeping until the deadline, not ticking, still closes the connection on time."""
    config = WebConfig(header_timeout=0.3)
    conns = Connections(config, HttpCounters())
    conns.start()
    a, b = socket.socketpair()
    try:
        conn = conns.admit(a)
        assert conn is not None
        deadline = time.monotonic() + 5
        while not conn.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert conn.closed and conn.reason == "timeout"
    finally:
        conns.stop()
        a.close()
        b.close()


def test_listener_serves_and_stops_without_a_polling_loop() -> None:
    """The serving thread sleeps until a connection or its stop: stop ends it at once
    (were it not woken, it would outlive stop's 2 s join)."""
    store = Store()
    server = HttpServer(
        WebConfig(listen_address="127.0.0.1:0"),
        Endpoints(Exposition(store, process_metrics=False), lambda: (True, []), lambda: {}),
    )
    server.start()
    thread = next(t for t in threading.enumerate() if t.name == "http" and t.is_alive())
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    server.stop()
    assert not thread.is_alive()
