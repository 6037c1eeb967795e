"""The HTTP listener: /metrics, /healthz, /readyz, /status and a landing page.

It runs on its own threads, apart from the event loop that polls, so any
number of slow or concurrent scrapes cannot delay a poll; and every handler
only reads the store and in-memory state, so a poll cannot delay a scrape.

A connection holds a request slot only while a request is served, after its
headers arrived complete (and its credentials passed): connections that say
nothing or trickle their headers are bounded by ``http_conns.Connections``
in number and time, and never stand between a scrape and its slot. Requests
beyond ``max_requests`` get 503 at once instead of piling up; /healthz and
/readyz take slots of their own that /metrics traffic cannot exhaust. TLS
handshakes happen on the connection's thread, under the header deadline.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, urlsplit

from exporter import __version__, log
from exporter.config.addresses import join_host_port, parse_listen_address
from exporter.config.web import WebConfig
from exporter.model import Reading
from exporter.outputs import http_request
from exporter.outputs.auth import BasicAuth, Verdict, tls_context
from exporter.outputs.http_conns import (
    AUTH_FAILURES,
    REFUSED,
    Conn,
    Connections,
    HttpCounters,
)
from exporter.outputs.prometheus import Exposition
from exporter.outputs.serve_loop import serve_until

if TYPE_CHECKING:
    import ssl

# Endpoints a kubelet probe must reach without credentials; they reveal nothing.
UNAUTHENTICATED = frozenset({"/healthz", "/readyz"})
# The device health API (docs/health-api.md): behind the listener's TLS and auth, unless
# web.health_api_unauthenticated lets a node-local reader in as the probes are.
DEVICES = "/v1/devices"
# Slots reserved for those probes: cheap answers, so a few cover any kubelet.
PROBE_SLOTS = 4
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
    b"Connection: close\r\nRetry-After: 1\r\n\r\n"
)


@dataclass
class Endpoints:
    """What the handlers read: the exposition, two state callbacks, and where counters go.

    ``counters`` outlives a listener (a reload may replace it); ``publish`` puts
    them into the store.
    """

    exposition: Exposition
    ready: Callable[[], tuple[bool, list[str]]]
    status: Callable[[], dict[str, Any]]
    counters: HttpCounters = field(default_factory=HttpCounters)
    publish: Callable[[Sequence[Reading]], None] | None = None
    devices: Callable[[], dict[str, Any]] | None = None


class ListenError(Exception):
    """The listen address cannot be bound (in use, no permission, unknown host)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Bind after choosing the address family ourselves.
    allow_reuse_address = True
    # Scrapers connect in bursts; socketserver's default backlog of 5 drops SYNs.
    request_queue_size = 128

    endpoints: Endpoints
    auth: BasicAuth | None
    tls: ssl.SSLContext | None
    client_cert_required: bool
    devices_exempt: bool
    send_timeout: float
    slots: threading.BoundedSemaphore
    probe_slots: threading.BoundedSemaphore
    conns: Connections

    def process_request(self, request: Any, client_address: Any) -> None:
        conn = self.conns.admit(request)
        if conn is None:
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            thread = threading.Thread(
                target=self._serve_connection, args=(conn, client_address), daemon=True
            )
            thread.start()
        except Exception:
            self.conns.release(conn)
            self.shutdown_request(request)
            raise

    def _serve_connection(self, conn: Conn, client_address: Any) -> None:
        request = conn.sock
        try:
            # The first byte is awaited without a TLS layer, so a connection that
            # never speaks is "waiting", not a handshake in progress; its deadline
            # is the reaper's business, not a socket timeout's.
            request.settimeout(None)
            if not request.recv(1, socket.MSG_PEEK) or not self.conns.reading(conn):
                return
            # The socket stays blocking for its whole life, as the standard library's
            # server keeps it: a Python timeout would poll before every send and
            # switch the socket's mode around every keep-alive wait, a GIL hand-over
            # each that loaded scrapers queue behind (docs/http.md). The read
            # timeout of a write (some progress at least this often) is the
            # kernel's SO_SNDTIMEO instead; every other deadline is the reaper's.
            request.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(self.send_timeout))
            tls = self.tls
            if tls is not None:
                request = tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                if not self.conns.replace_socket(conn, request):
                    return
                request.do_handshake()
            _Handler(request, client_address, self, conn)
        except OSError as exc:  # ssl.SSLError is one
            if not self.conns.closed_early(conn):
                log.get(output="http").debug(
                    "connection ended", client=client_address[0], error=str(exc)
                )
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.conns.release(conn)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.get(output="http").debug("connection error", client=client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    raw_requestline: bytes  # set by handle_one_request, untyped in the stubs
    protocol_version = "HTTP/1.1"
    server_version = f"accel-exporter/{__version__}"

    def __init__(self, request: Any, client_address: Any, server: _Server, conn: Conn) -> None:
        self.conn = conn
        super().__init__(request, client_address, server)

    def version_string(self) -> str:
        """The Server header: this program only, not the Python version (a scanner's gift)."""
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs are off: one line per scrape would drown everything else."""

    def handle(self) -> None:
        """Serve requests until the connection closes; between them it waits, holding nothing."""
        conns = self.server.conns
        self.handle_one_request()
        while not self.close_connection:
            if not conns.waiting(self.conn):
                return
            # Blocks until the next request's first byte, or until the reaper shuts
            # the socket down: the idle timeout is its business, not a socket timeout.
            if not cast(io.BufferedReader, self.rfile).peek(1) or not conns.reading(self.conn):
                return
            self.handle_one_request()

    # Answers, error pages included, always carry a status line and headers:
    # HTTP/0.9 (a request line without a version, a bare body back) is refused.
    default_request_version = "HTTP/1.0"

    def parse_request(self) -> bool:
        """Parse the request line and headers; from here on the connection is serving.

        As the standard library's, with the headers read by ``http_request``.
        """
        self.command = None  # type: ignore[assignment]  # as the standard library's
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        try:
            line = http_request.request_line(self.requestline)
            if line is None:
                return False
            self.request_version = line.version
            self.close_connection = not line.keep_alive
            self.command, self.path = line.method, line.target
            self.headers = http_request.headers(self.rfile)
        except http_request.BadRequest as exc:
            self.send_error(exc.status, exc.message)
            return False
        connection = self.headers.get("Connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive":
            self.close_connection = False
        expect = self.headers.get("Expect", "").lower()
        if expect == "100-continue" and line.keep_alive and not self.handle_expect_100():
            return False
        if not self.server.conns.serving(self.conn):
            self.close_connection = True
            return False
        return True

    def _send(
        self,
        code: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        """Same as GET without a body."""
        self.do_GET()

    def do_GET(self) -> None:
        """Route a request; any exception becomes a 500 without killing the server."""
        url = urlsplit(self.path)
        try:
            if url.path in UNAUTHENTICATED:
                self._with_slot(self.server.probe_slots, url.path, parse_qs(url.query))
                return
            if url.path == DEVICES and self.server.devices_exempt:
                self._with_slot(self.server.slots, url.path, parse_qs(url.query))
                return
            if self.server.client_cert_required:
                cert = getattr(self.connection, "getpeercert", lambda: None)()
                if not cert:
                    self._send(403, b"Forbidden: this path needs a client certificate\n")
                    return
            if not self._authorized():
                return
            self._with_slot(self.server.slots, url.path, parse_qs(url.query))
        except (BrokenPipeError, ConnectionResetError, TimeoutError, BlockingIOError):
            # BlockingIOError: a write made no progress within SO_SNDTIMEO.
            self.close_connection = True
        except Exception as exc:
            log.get(output="http").error("request failed", path=url.path, error=repr(exc))
            try:
                self._send(500, b"internal error\n")
            except OSError:
                self.close_connection = True

    def _authorized(self) -> bool:
        """Check credentials before a slot is taken; answer 401 or 503 when they fail."""
        auth = self.server.auth
        if auth is None:
            return True
        verdict = auth.verify(self.headers.get("Authorization"))
        if verdict is Verdict.OK:
            return True
        counters = self.server.endpoints.counters
        if verdict is Verdict.BUSY:
            counters.add(REFUSED, "auth")
            self._busy()
            return False
        counters.add(AUTH_FAILURES, verdict.value)
        self._send(
            401, b"Unauthorized\n", headers={"WWW-Authenticate": 'Basic realm="accel-exporter"'}
        )
        return False

    def _with_slot(
        self, slots: threading.BoundedSemaphore, path: str, query: dict[str, list[str]]
    ) -> None:
        # The semaphore is the one captured here: a reload may swap in a new one
        # meanwhile, and this request must release the one it took.
        if not slots.acquire(blocking=False):
            self.server.endpoints.counters.add(REFUSED, "requests")
            self._busy()
            return
        try:
            self._route(path, query)
        finally:
            slots.release()

    def _busy(self) -> None:
        self.close_connection = True
        self._send(
            503, b"Service Unavailable\n", headers={"Retry-After": "1", "Connection": "close"}
        )

    def _not_allowed(self) -> None:
        self._send(405, b"Method Not Allowed\n", headers={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        endpoints = self.server.endpoints
        if path == "/metrics":
            names = query.get("name[]")
            body, headers = endpoints.exposition.render(
                self.headers.get("Accept"), self.headers.get("Accept-Encoding"), names
            )
            content_type = headers.pop("Content-Type")
            self._send(200, body, content_type, headers)
        elif path == "/healthz":
            self._send(200, b"ok\n")
        elif path == "/readyz":
            ready, pending = endpoints.ready()
            if ready:
                self._send(200, b"ready\n")
            else:
                self._send(
                    503, ("waiting for first poll of: " + ", ".join(pending) + "\n").encode()
                )
        elif path == "/status":
            body = json.dumps(endpoints.status(), indent=2, sort_keys=True, default=str).encode()
            self._send(200, body + b"\n", "application/json")
        elif path == DEVICES and endpoints.devices is not None:
            body = json.dumps(endpoints.devices(), indent=2, sort_keys=True).encode()
            self._send(200, body + b"\n", "application/json")
        elif path == "/":
            self._send(200, _landing().encode(), "text/html; charset=utf-8")
        elif path == "/favicon.ico":
            self._send(204, b"")
        else:
            self._send(404, b"Not Found\n")


def _timeval(seconds: float) -> bytes:
    """``seconds`` as the ``struct timeval`` SO_SNDTIMEO takes."""
    whole = int(seconds)
    return struct.pack("@ll", whole, int((seconds - whole) * 1_000_000))


def _landing() -> str:
    links = "".join(
        f'<li><a href="{p}">{p}</a> {html.escape(d)}</li>'
        for p, d in (
            ("/metrics", "Prometheus metrics"),
            ("/status", "source state as JSON"),
            ("/v1/devices", "device health as JSON (docs/health-api.md)"),
            ("/healthz", "liveness"),
            ("/readyz", "readiness (every source polled once)"),
        )
    )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>accel-exporter</title></head>'
        f"<body><h1>accel-exporter {html.escape(__version__)}</h1><ul>{links}</ul></body></html>\n"
    )


def _bind(host: str, port: int) -> _Server:
    """Create and bind the server; ``""`` means every interface, IPv6 and IPv4."""
    candidates: list[tuple[int, tuple[Any, ...]]] = []
    if host in ("", "*"):
        if socket.has_ipv6:
            candidates.append((socket.AF_INET6, ("::", port)))
        candidates.append((socket.AF_INET, ("0.0.0.0", port)))
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ListenError(f"cannot resolve listen host {host!r}: {exc.strerror}") from None
        candidates = [(family, addr) for family, _, _, _, addr in infos]
    last: OSError | None = None
    for family, addr in candidates:
        server_cls: type[_Server] = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            # The handler class goes unused: _serve_connection builds each handler itself.
            server = server_cls(addr, BaseHTTPRequestHandler, bind_and_activate=False)
        except OSError as exc:
            last = exc
            continue
        try:
            if family == socket.AF_INET6 and host in ("", "*"):
                server.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            server.server_bind()
            server.server_activate()
            return server
        except OSError as exc:
            server.server_close()
            last = exc
    where = f"{host or '*'}:{port}"
    reason = last.strerror if last is not None and last.strerror else str(last)
    raise ListenError(f"cannot listen on {where}: {reason}")


class HttpServer:
    """The listener and its serving thread."""

    def __init__(self, config: WebConfig, endpoints: Endpoints) -> None:
        host, port = parse_listen_address(config.listen_address)
        self.config = config
        tls = tls_context(config.tls) if config.tls is not None else None
        self._server = _bind(host, port)
        self._server.endpoints = endpoints
        self._server.conns = Connections(config, endpoints.counters, endpoints.publish)
        self._apply(config, tls)
        self._thread: threading.Thread | None = None
        # Written to once, to end the serving thread (see serve_loop.serve_until).
        self._wake: tuple[socket.socket, socket.socket] | None = None

    def _apply(self, config: WebConfig, tls: ssl.SSLContext | None) -> None:
        self._server.auth = BasicAuth(config.basic_auth) if config.basic_auth is not None else None
        self._server.tls = tls
        self._server.client_cert_required = (
            config.tls is not None and tls is not None and config.tls.client_cert_required
        )
        self._server.send_timeout = config.send_timeout
        self._server.devices_exempt = config.health_api_unauthenticated
        self._server.slots = threading.BoundedSemaphore(config.max_requests)
        self._server.probe_slots = threading.BoundedSemaphore(PROBE_SLOTS)
        self._server.conns.config = config

    def reconfigure(self, config: WebConfig) -> None:
        """Apply new credentials, certificates and limits on the same socket.

        Certificates are read from disk again even when their paths did not
        change, so renewed files take effect on SIGHUP. Raises (changing nothing)
        when they cannot be loaded. Requests already running finish as they began.
        """
        if parse_listen_address(config.listen_address) != parse_listen_address(
            self.config.listen_address
        ):
            raise ValueError("reconfigure cannot change the listen address")
        tls = tls_context(config.tls) if config.tls is not None else None
        self._apply(config, tls)
        self.config = config

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the port is real even when 0 was asked for)."""
        addr = self._server.server_address
        return str(addr[0]), int(addr[1])

    @property
    def url(self) -> str:
        """Base URL of the listener."""
        host, port = self.address
        scheme = "https" if self._server.tls is not None else "http"
        return f"{scheme}://{join_host_port(host, port)}"

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._wake = socket.socketpair()
        self._thread = threading.Thread(
            target=serve_until, args=(self._server, self._wake[0]), name="http", daemon=True
        )
        self._thread.start()
        self._server.conns.start()

    @property
    def connections(self) -> Connections:
        """The open connections and their limits."""
        return self._server.conns

    def stop(self) -> None:
        """Stop accepting, close the socket and every open connection."""
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._server.server_close()
        self._server.conns.stop()
        if self._wake is not None:
            for end in self._wake:
                end.close()
            self._wake = None
