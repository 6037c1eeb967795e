"""A loopback TCP server that misbehaves on purpose: every connection runs a test's script.

``with RogueServer(script, tls=context) as server: server.url`` accepts on
127.0.0.1 and hands each connection (TLS-wrapped first when ``tls`` is given, the
handshake on the connection's own thread) to ``script(conn, server)``: answer
garbage, stall, trickle, stream forever. ``server.connections`` counts the
connections accepted and ``server.requests`` holds each request head read by
:meth:`read_request`, so a server that must never be asked (a redirect's target, a
proxy) proves it was not. A script waits with :meth:`hold` or checks
:attr:`stopping`; leaving the ``with`` stops every script and closes every
connection.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable
from typing import TypeVar

S = TypeVar("S", bound="RogueServer")
Script = Callable[[socket.socket, "RogueServer"], None]
# The longest any script waits; leaving the ``with`` ends it at once.
LONGEST_SECONDS = 120.0


class RogueServer:
    """Runs ``script`` on every connection accepted on loopback (see the module docstring)."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self._script = script
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.stopping = threading.Event()
        self.connections = 0
        self.requests: list[bytes] = []
        self._open: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, name="rogue-accept", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    def __enter__(self: S) -> S:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._acceptor.join(timeout=5)
        self._listener.close()
        with self._lock:
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            with self._lock:
                self.connections += 1
                self._open.append(conn)
                self._threads.append(thread)
            thread.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn.settimeout(LONGEST_SECONDS)
                conn = self._tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._open.append(conn)
            conn.settimeout(LONGEST_SECONDS)
            self._script(conn, self)
        except OSError:
            pass  # the client gave up, or the server is stopping
        finally:
            conn.close()

    def hold(self, seconds: float = LONGEST_SECONDS) -> None:
        """Wait ``seconds``, or until the server stops."""
        self.stopping.wait(seconds)

    def read_request(self, conn: socket.socket) -> bytes:
        """Read a request (head and Content-Length body), recorded in :attr:`requests`.

        The body is read too: a socket closed with unread data sends a reset, which
        can discard the reply the client has not read yet.
        """
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                length = int(value)
        while len(body) < length:
            chunk = conn.recv(length - len(body))
            if not chunk:
                break
            body += chunk
        with self._lock:
            self.requests.append(data[: len(head) + 4] + body)
        return head

    def trickle(self, conn: socket.socket, data: bytes, every: float) -> None:
        """Send ``data`` one byte per ``every`` seconds, until done or stopped."""
        for i in range(len(data)):
            if self.stopping.is_set():
                return
            conn.sendall(data[i : i + 1])
            self.stopping.wait(every)


def server_tls(pki_dir: str) -> ssl.SSLContext:
    """A server context with the test PKI's ``server`` certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(f"{pki_dir}/server.pem", f"{pki_dir}/server.key")
    return context
