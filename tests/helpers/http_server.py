"""A loopback HTTP(S) server on a free port, served by a thread for the length of a ``with``."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

S = TypeVar("S", bound="LoopbackServer")


class LoopbackServer:
    """Serves ``handler`` on 127.0.0.1 (over TLS with ``tls``) inside ``with``."""

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
    ) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}"

    def __enter__(self: S) -> S:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
