"""Request slots, reserved probe slots and the connection cap, on the real listener in-process.

The exposition is the real one with its render held on an event, so a test
can keep a request "being served" for as long as it likes.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from exporter.config.web import WebConfig
from exporter.outputs.http import PROBE_SLOTS, Endpoints, HttpServer
from exporter.outputs.http_conns import HEADER_TIMEOUTS, IDLE_CLOSED, REFUSED, WRITE_TIMEOUTS
from exporter.outputs.prometheus import Exposition
from exporter.store import Store


class HeldExposition(Exposition):
    """Renders only once ``release`` is set; counts the renders under way."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, process_metrics=False)
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def render(self, accept, accept_encoding, names=None):
        self.entered.release()
        self.release.wait(30)
        return super().render(accept, accept_encoding, names)


@pytest.fixture
def served() -> Iterator[tuple[HttpServer, HeldExposition]]:
    store = Store()
    expo = HeldExposition(store)
    # Deadlines far away: here only the limits close connections.
    config = WebConfig(
        listen_address="127.0.0.1:0", max_requests=2, max_connections=6, header_timeout=120.0
    )
    server = HttpServer(
        config,
        Endpoints(expo, lambda: (True, []), lambda: {}, publish=lambda r: store.publish("http", r)),
    )
    server.start()
    yield server, expo
    expo.release.set()
    server.stop()


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def get(server: HttpServer, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(*server.address, timeout=20)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_busy_request_slots_give_503_but_probes_have_their_own(served):
    server, expo = served
    results: list[int] = []
    held = [
        threading.Thread(target=lambda: results.append(get(server, "/metrics")[0]))
        for _ in range(2)
    ]
    for t in held:
        t.start()
    for _ in held:
        assert expo.entered.acquire(timeout=20)
    # Both request slots are taken by requests being served: a third is refused at once.
    status, _ = get(server, "/metrics")
    assert status == 503
    assert server.connections.counters.get(REFUSED, "requests") == 1
    # The probes are answered from their reserved slots meanwhile.
    for _ in range(PROBE_SLOTS + 2):
        assert get(server, "/healthz")[0] == 200
        assert get(server, "/readyz")[0] == 200
    expo.release.set()
    for t in held:
        t.join(timeout=20)
    assert results == [200, 200]
    assert get(server, "/metrics")[0] == 200


def test_connection_cap_closes_idle_first_then_slow_headers(served):
    server, expo = served
    host, port = server.address
    socks = [socket.create_connection((host, port), timeout=20) for _ in range(4)]
    extras: list[socket.socket] = []
    held: list[threading.Thread] = []
    try:
        # The two oldest start a request and never finish it; the two newer say nothing.
        for reading, s in enumerate(socks[:2], 1):
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            # In this order: the first has spent longer on its headers.
            wait_until(lambda n=reading: server.connections.counts()["reading"] == n)
        # Two requests being served: six connections open, the cap.
        for _ in range(2):
            t = threading.Thread(target=get, args=(server, "/metrics"))
            t.start()
            held.append(t)
            assert expo.entered.acquire(timeout=20)
        # Each new connection closes one that holds nothing: the idle ones first,
        # although the unfinished requests are older...
        for s in socks[2:]:
            extra = socket.create_connection((host, port), timeout=20)
            extras.append(extra)
            assert s.recv(10) == b""
            extra.sendall(b"GET /metrics HTTP/1.1\r\n")
        assert server.connections.counters.get(IDLE_CLOSED, "limit") == 2
        assert server.connections.counters.get(HEADER_TIMEOUTS) == 0
        # ... then the one that has spent longest on its headers.
        with socket.create_connection((host, port), timeout=20) as extra:
            assert socks[0].recv(10) == b""
            assert server.connections.counters.get(HEADER_TIMEOUTS) == 1
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert extra.recv(100).startswith(b"HTTP/1.1 200")
        assert server.connections.counters.get(REFUSED, "connections") == 0
    finally:
        expo.release.set()
        for t in held:
            t.join(timeout=20)
        for s in socks + extras:
            s.close()


class BigExposition(Exposition):
    """A body far larger than the socket buffers, so a client that does not read stalls it."""

    def render(self, accept, accept_encoding, names=None):
        return b"#" * (32 << 20), {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}


def stalled_scrape(server: HttpServer) -> socket.socket:
    """A client that asks for /metrics and never reads the answer, once it is served."""
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(server.address)
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_until(lambda: server.connections.counts()["serving"] == 1)
    return slow


def test_a_client_that_does_not_read_loses_its_slot_at_the_write_timeout():
    store = Store()
    config = WebConfig(
        listen_address="127.0.0.1:0", max_requests=1, write_timeout=1.0, send_timeout=60.0
    )
    server = HttpServer(config, Endpoints(BigExposition(store), lambda: (True, []), lambda: {}))
    server.start()
    try:
        slow = stalled_scrape(server)
        # Its answer is never read: the write timeout (not the 60 s read timeout) ends it.
        wait_until(lambda: server.connections.counters.get(WRITE_TIMEOUTS) == 1)
        slow.close()
        # The only slot is free again. The reaper forgets the connection at once;
        # its thread gives the request slot back when its blocked write fails, a
        # moment later, so a scrape in between may still get 503.
        wait_until(lambda: server.connections.counts()["serving"] == 0)
        wait_until(lambda: get(server, "/metrics")[0] == 200)
    finally:
        server.stop()


def test_a_write_without_progress_ends_at_the_send_timeout():
    """send_timeout bounds each write's progress (the kernel's SO_SNDTIMEO on the blocking
    socket), well inside a write_timeout that is far away: the reaper closes nothing."""
    store = Store()
    config = WebConfig(
        listen_address="127.0.0.1:0", max_requests=1, write_timeout=120.0, send_timeout=0.5
    )
    server = HttpServer(config, Endpoints(BigExposition(store), lambda: (True, []), lambda: {}))
    server.start()
    try:
        slow = stalled_scrape(server)
        # Never read: the stalled write fails, the connection closes, its slot is free.
        wait_until(lambda: server.connections.counts()["serving"] == 0, timeout=60)
        wait_until(lambda: get(server, "/metrics")[0] == 200)
        assert server.connections.counters.get(WRITE_TIMEOUTS) == 0
        slow.close()
    finally:
        server.stop()
