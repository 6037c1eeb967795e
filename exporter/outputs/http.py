"""The HTTP listener: /metrics, /healthz, /readyz, /status and a landing page.

It runs on its own threads, apart from the event loop that polls, so any
number of slow or concurrent scrapes cannot delay a poll; and every handler
only reads the store and in-memory state, so a poll cannot delay a scrape.
Connections beyond ``max_requests`` get 503 at once instead of piling up
threads; TLS handshakes happen on the connection's thread, not the acceptor's.
"""

from __future__ import annotations

import contextlib
import html
import json
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from exporter import __version__, log
from exporter.config.addresses import parse_listen_address
from exporter.config.schema import WebConfig
from exporter.outputs.auth import BasicAuth, tls_context
from exporter.outputs.prometheus import Exposition

# Endpoints a kubelet probe must reach without credentials; they reveal nothing.
UNAUTHENTICATED = frozenset({"/healthz", "/readyz"})


@dataclass
class Endpoints:
    """What the handlers read: the exposition and two state callbacks."""

    exposition: Exposition
    ready: Callable[[], tuple[bool, list[str]]]
    status: Callable[[], dict[str, Any]]


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
    read_timeout: float
    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        # The semaphore is captured per connection: a reload may swap in a new one
        # while this connection runs, and it must release the one it took.
        slots = self.slots
        if not slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\nRetry-After: 1\r\n\r\n"
                )
            self.shutdown_request(request)
            return
        try:
            thread = threading.Thread(
                target=self._serve_connection, args=(request, client_address, slots), daemon=True
            )
            thread.start()
        except Exception:
            slots.release()
            raise

    def _serve_connection(
        self, request: Any, client_address: Any, slots: threading.BoundedSemaphore
    ) -> None:
        try:
            request.settimeout(self.read_timeout)
            tls = self.tls
            if tls is not None:
                try:
                    request = tls.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    log.get(output="http").debug(
                        "tls handshake failed", client=client_address[0], error=str(exc)
                    )
                    self.shutdown_request(request)
                    return
            self.process_request_thread(request, client_address)
        finally:
            slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.get(output="http").debug("connection error", client=client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = f"accel-exporter/{__version__}"

    def version_string(self) -> str:
        """The Server header: this program only, not the Python version (a scanner's gift)."""
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs are off: one line per scrape would drown everything else."""

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
            if self.server.client_cert_required and url.path not in UNAUTHENTICATED:
                cert = getattr(self.connection, "getpeercert", lambda: None)()
                if not cert:
                    self._send(403, b"Forbidden: this path needs a client certificate\n")
                    return
            auth = self.server.auth
            if url.path not in UNAUTHENTICATED and auth is not None:  # noqa: SIM102
                if not auth.check(self.headers.get("Authorization")):
                    self._send(
                        401,
                        b"Unauthorized\n",
                        headers={"WWW-Authenticate": 'Basic realm="accel-exporter"'},
                    )
                    return
            self._route(url.path, parse_qs(url.query))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception as exc:
            log.get(output="http").error("request failed", path=url.path, error=repr(exc))
            try:
                self._send(500, b"internal error\n")
            except OSError:
                self.close_connection = True

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
        elif path == "/":
            self._send(200, _landing().encode(), "text/html; charset=utf-8")
        elif path == "/favicon.ico":
            self._send(204, b"")
        else:
            self._send(404, b"Not Found\n")


def _landing() -> str:
    links = "".join(
        f'<li><a href="{p}">{p}</a> {html.escape(d)}</li>'
        for p, d in (
            ("/metrics", "Prometheus metrics"),
            ("/status", "source state as JSON"),
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
            server = server_cls(addr, _Handler, bind_and_activate=False)
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
        self._apply(config, tls)
        self._thread: threading.Thread | None = None

    def _apply(self, config: WebConfig, tls: ssl.SSLContext | None) -> None:
        self._server.auth = BasicAuth(config.basic_auth) if config.basic_auth is not None else None
        self._server.tls = tls
        self._server.client_cert_required = (
            config.tls is not None and tls is not None and config.tls.client_cert_required
        )
        self._server.read_timeout = config.read_timeout
        self._server.slots = threading.BoundedSemaphore(config.max_requests)

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
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}"

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
