"""A loopback HTTP server that serves a fixed /metrics body (a stand-in daemon for checks)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers.http_server import LoopbackServer


class MetricsServer(LoopbackServer):
    """``with MetricsServer() as s: s.body = "..."; s.url``; ``status`` sets the HTTP code."""

    def __init__(self) -> None:
        self.body = ""
        self.status = 200
        self.requests: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append({"path": self.path, **dict(self.headers)})
                data = owner.body.encode()
                self.send_response(owner.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(Handler)
