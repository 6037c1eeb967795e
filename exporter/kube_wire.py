"""One HTTPS exchange with the Kubernetes API server, under one deadline from connect to body.

:func:`exchange` is the transport of :class:`exporter.kube.KubeClient`, imported
only when a request is sent: ``http.client`` (which brings ``email``) and ``ssl``
cost resident memory on every node, and only a node that talks to the API server
needs them.

A socket timeout bounds one operation, not a request: a server trickling a byte
every 0.1 s would keep ``urlopen`` waiting forever. Here every operation is given
only the time left to the whole exchange (name resolution, connect, TLS handshake,
send, status line, headers, body), and none starts once it is spent: CPython's SSL
``read`` and ``do_handshake`` take a socket timeout as the total for that call, so
the exchange ends within its deadline whatever the server does. http.client frames
the request and reply (status line, headers, Content-Length, chunked); it follows no
redirect and reads no proxy variable, and none is added here.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any

from exporter.errors import KubeError

# Where a deadline ran out, for the error's detail (what a person looks at first).
CONNECTING, HANDSHAKE, SENDING = "connecting", "in the TLS handshake", "sending the request"
STATUS, BODY = "waiting for the status line and headers", "reading the body"


@dataclass(frozen=True)
class Answer:
    """An HTTP reply as read: status, the Location header (for 3xx) and the body, capped."""

    status: int
    location: str
    body: bytes


class Deadline:
    """The end of one exchange; :meth:`left` raises once it has passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left, above zero; TimeoutError when none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


class _DeadlineReader(io.RawIOBase):
    """The socket as raw input whose every read is given only the time left."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        """Always: this is the reply stream."""
        return True

    def readinto(self, buffer: Any) -> int:
        """One receive, within what is left of the deadline."""
        self._sock.settimeout(self._deadline.left())
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What http.client asks of a socket (sendall, makefile, close), under the deadline.

    ``close`` does nothing: http.client closes its connection as soon as a reply says
    ``Connection: close``, before the body is read; the exchange closes the real
    socket itself when it is done.
    """

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._deadline = deadline

    def sendall(self, data: Any) -> None:
        """Send everything, each send within what is left of the deadline."""
        view = memoryview(data).cast("B")
        while view:
            self._sock.settimeout(self._deadline.left())
            sent = self._sock.send(view)
            view = view[sent:]

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        """The reply stream (http.client asks for "rb" only)."""
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def close(self) -> None:
        """Nothing: see the class docstring."""


def tls_context(ca_file: str) -> ssl.SSLContext:
    """Trust the cluster CA only, TLS 1.2 or later, the host name checked."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise KubeError("tls_error", f"cannot load the CA {ca_file}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _addresses(host: str, port: int, deadline: Deadline) -> list[Any]:
    """The addresses of ``host``, within the deadline (a name is resolved on a thread)."""
    kind = socket.SOCK_STREAM
    try:  # an address literal (the in-cluster service) needs no resolver
        return socket.getaddrinfo(host, port, type=kind, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    found: list[Any] = []
    failed: list[OSError] = []

    def resolve() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=kind))
        except OSError as exc:
            failed.append(exc)

    # A resolver that hangs keeps this thread until its own timeout (resolv.conf), not us.
    worker = threading.Thread(target=resolve, name="kube-resolve", daemon=True)
    worker.start()
    worker.join(deadline.left())
    if worker.is_alive():
        raise TimeoutError(f"resolving {host}")
    if failed:
        raise failed[0]
    return found


def _connect(host: str, port: int, deadline: Deadline) -> socket.socket:
    """A TCP connection to the first address of ``host`` that takes one in time."""
    error: OSError = OSError(f"{host} has no address")
    for family, kind, proto, _, address in _addresses(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left())
            sock.connect(address)
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


def exchange(
    *,
    host: str,
    port: int,
    context: ssl.SSLContext,
    method: str,
    target: str,
    headers: dict[str, str],
    body: bytes | None,
    timeout: float,
    max_bytes: int,
) -> Answer:
    """Send one request on a connection of its own and read the reply, all within ``timeout``.

    ``context`` is :func:`tls_context`'s (the cluster CA). A reply over ``max_bytes``
    is ``reply_too_large`` (refused before reading when its Content-Length says so);
    the connection is always closed.
    """
    deadline = Deadline(timeout)
    where = f"{host}:{port}"
    stage = CONNECTING
    sock: socket.socket | None = None
    try:
        sock = _connect(host, port, deadline)
        stage = HANDSHAKE
        sock = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        sock.settimeout(deadline.left())
        sock.do_handshake()
        stage = SENDING
        conn = http.client.HTTPConnection(host, port)
        conn.sock = _DeadlineSocket(sock, deadline)
        conn.request(method, target, body=body, headers=headers)
        stage = STATUS
        reply = conn.getresponse()
        if 300 <= reply.status < 400:  # not followed, so its body is of no use
            return Answer(reply.status, reply.getheader("Location") or "", b"")
        stage = BODY
        if reply.length is not None and reply.length > max_bytes:
            raise KubeError(
                "reply_too_large", f"{where}: the reply is {reply.length} bytes (limit {max_bytes})"
            )
        data = reply.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise KubeError("reply_too_large", f"{where}: the reply exceeds {max_bytes} bytes")
        if reply.length:  # http.client returns a short body, without a word, at EOF
            raise KubeError(
                "bad_reply", f"{where}: the connection closed {reply.length} bytes before the end"
            )
        return Answer(reply.status, "", data)
    except TimeoutError:
        raise KubeError(
            "timeout", f"{where}: no complete reply within {deadline.seconds:g}s ({stage})"
        ) from None
    except ssl.SSLError as exc:
        raise KubeError("tls_error", f"{where}: {exc}") from None
    except http.client.HTTPException as exc:  # not HTTP, or cut off mid-reply
        detail = f"{where}: not an HTTP reply ({stage}): {exc!r}"[:300]
        raise KubeError("bad_reply", detail) from None
    except OSError as exc:
        raise KubeError("unreachable", f"{where}: {exc.strerror or exc} ({stage})") from None
    finally:
        if sock is not None:
            sock.close()
