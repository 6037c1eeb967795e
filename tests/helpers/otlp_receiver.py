"""Real OTLP receivers for tests: OTLP/HTTP and OTLP/gRPC, on loopback free ports.

Both decode every ``ExportMetricsServiceRequest`` with opentelemetry-proto and
keep it with its arrival time and headers. ``mode`` switches behaviour while
running: ``ok`` answers success, ``refuse`` answers a non-retryable error, and
``SilentServer`` accepts connections and never says a word.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as service_grpc

from tests.helpers.wait import eventually


@dataclass(frozen=True)
class Tls:
    """Server certificate and key; with ``client_ca`` clients must present a certificate."""

    cert: str
    key: str
    client_ca: str = ""


@dataclass
class Received:
    at: float
    request: service_pb2.ExportMetricsServiceRequest
    headers: dict[str, str]


@dataclass
class _Log:
    items: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    attempts: int = 0

    def add(
        self, request: service_pb2.ExportMetricsServiceRequest, headers: dict[str, str]
    ) -> None:
        with self.lock:
            self.items.append(Received(time.time(), request, headers))

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.items)


class _Receiver:
    """What both receivers share: the log, the mode and waiting for requests."""

    def __init__(self) -> None:
        self.log = _Log()
        self.mode = "ok"
        self.port = 0

    @property
    def requests(self) -> list[Received]:
        return self.log.snapshot()

    def wait(self, predicate: Any = None, timeout: float = 30.0) -> Received:
        """The first request (after any already seen that fail ``predicate``) that matches."""

        def first() -> Received | None:
            return next((r for r in self.requests if predicate is None or predicate(r)), None)

        try:
            return eventually(first, timeout=timeout, what="a matching OTLP request")
        except AssertionError:
            raise AssertionError(
                f"no matching OTLP request within {timeout}s ({len(self.requests)} received)"
            ) from None


class HttpReceiver(_Receiver):
    """OTLP/HTTP (protobuf) at ``/v1/metrics``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: Tls | None = None) -> None:
        super().__init__()
        receiver = self
        self.scheme = "https" if tls else "http"

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                receiver.log.attempts += 1
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/metrics":
                    self._answer(404, b"")
                    return
                if receiver.mode == "refuse":
                    self._answer(400, b"refused by test")
                    return
                request = service_pb2.ExportMetricsServiceRequest()
                request.ParseFromString(body)
                receiver.log.add(request, {k.lower(): v for k, v in self.headers.items()})
                reply = service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self._answer(200, reply)

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls.cert, tls.key)
            if tls.client_ca:
                ctx.load_verify_locations(tls.client_ca)
                ctx.verify_mode = ssl.CERT_REQUIRED
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class GrpcReceiver(_Receiver):
    """OTLP/gRPC: the real MetricsService on an insecure loopback port."""

    def __init__(self, port: int = 0, tls: Tls | None = None) -> None:
        super().__init__()
        receiver = self
        self.scheme = "https" if tls else "http"

        class Service(service_grpc.MetricsServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                receiver.log.attempts += 1
                if receiver.mode == "refuse":
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused by test")
                metadata = {k: v for k, v in context.invocation_metadata()}
                receiver.log.add(request, metadata)
                return service_pb2.ExportMetricsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service_grpc.add_MetricsServiceServicer_to_server(Service(), self._server)
        address = f"127.0.0.1:{port}"
        if tls is None:
            self.port = self._server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(Path(tls.key).read_bytes(), Path(tls.cert).read_bytes())],
                root_certificates=Path(tls.client_ca).read_bytes() if tls.client_ca else None,
                require_client_auth=bool(tls.client_ca),
            )
            self.port = self._server.add_secure_port(address, credentials)
        if self.port == 0:
            raise OSError(f"cannot listen on 127.0.0.1:{port}")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.stop(grace=None).wait(5)


class SilentServer:
    """Accepts TCP connections, reads nothing back, answers nothing, until closed."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self.connections:
            conn.close()
        self._sock.close()


def free_port() -> int:
    """A loopback port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
