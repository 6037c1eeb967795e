"""Asyncio client of the NCCL/RCCL RAS service (``ncclras`` / ``rcclras`` protocol).

One report per connection: ``CLIENT PROTOCOL 2``, ``TIMEOUT <s>``, ``SET FORMAT
json`` (servers before 2.28.7 answer ``ERROR: Unknown command`` and keep the
connection, so the same connection goes on in text), then ``STATUS`` or
``VERBOSE STATUS`` and read until the server closes the socket - the report has
no terminator, and the text line ``Communicators...`` arrives without its
newline while the job-wide RAS collective runs. The protocol number is 2 in
every release, so features are detected by trying them, never by that number.

Every step runs under one deadline, the body under a size cap. Failures raise
:class:`RasClientError` carrying the job state they imply: ``no_job`` (nothing
listens), ``unreachable`` (deadline) or ``error`` (anything else).

``localhost`` resolves to ``::1`` and ``127.0.0.1`` on many systems while NCCL
binds only the first address it resolves, so every resolved address is tried
in order until one accepts.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.ccl.ras_events import MonitorDecoder, MonitorEvent
from exporter.config.addresses import split_host_port

DEFAULT_PORT = 28028
PROTOCOL = 2
READ_CHUNK = 64 * 1024
# NCCL's default per-leg collective timeout; a whole collective ends after leg + 5 s.
DEFAULT_LEG_TIMEOUT = 5
COLLECTIVE_EXTRA_SECONDS = 5
# Errors that mean "nothing of ours at this address" rather than "stuck".
_ABSENT = {errno.ECONNREFUSED, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.ENETUNREACH}

Resolver = Callable[[str, int], Awaitable[Sequence[tuple[int, Any]]]]


class RasClientError(Exception):
    """A query failed. ``state``: no_job, unreachable or error; ``reason``: snake_case code."""

    def __init__(self, state: str, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.state = state
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Endpoint:
    """One RAS address as configured (``label``) and split into host and port."""

    label: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``host:port``, ``[v6]:port`` or ``host`` (port 28028, never 0); ValueError otherwise."""
        host, port = split_host_port(text, default_port=DEFAULT_PORT)
        if not host:
            raise ValueError(f"missing host in {text!r}")
        if port == 0:
            raise ValueError(f"port 0 in {text!r}: RAS listens on a real port")
        return cls(text.strip(), host, port)


@dataclass(frozen=True)
class RasResponse:
    """The raw report, the format it is in, which address answered, how long it took."""

    body: bytes
    format: str
    peer: str
    seconds: float
    protocol: str = str(PROTOCOL)  # the number in the server's SERVER PROTOCOL line


@dataclass(frozen=True)
class QueryOptions:
    """How to query: overall deadline, wanted format, verbosity, body cap."""

    deadline: float
    format: str = "auto"
    verbose: bool = True
    max_bytes: int = 32 * 1024 * 1024

    @property
    def leg_timeout(self) -> int:
        """The ``TIMEOUT`` to ask for, so that the server gives up before our deadline."""
        budget = int(self.deadline) - COLLECTIVE_EXTRA_SECONDS - 1
        return max(1, min(DEFAULT_LEG_TIMEOUT, budget))


async def system_resolver(host: str, port: int) -> Sequence[tuple[int, Any]]:
    """(family, sockaddr) for every address ``host`` resolves to, in resolver order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[tuple[int, Any]] = []
    for family, _, _, _, sockaddr in infos:
        if (family, sockaddr) not in seen:
            seen.append((family, sockaddr))
    return seen


def _peer(family: int, sockaddr: Any) -> str:
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"


class _Progress:
    """What a query got to before it failed (for the error detail)."""

    def __init__(self) -> None:
        self.step = "connecting"
        self.received = 0


async def _connect(
    endpoint: Endpoint, resolver: Resolver, progress: _Progress
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    try:
        addresses = await resolver(endpoint.host, endpoint.port)
    except OSError as exc:
        raise RasClientError("error", "resolve_failed", f"{endpoint.host}: {exc}") from None
    if not addresses:
        raise RasClientError("error", "resolve_failed", f"{endpoint.host}: no address")
    failures: list[str] = []
    absent = True
    for family, sockaddr in addresses:
        peer = _peer(family, sockaddr)
        progress.step = f"connecting to {peer}"
        try:
            reader, writer = await asyncio.open_connection(
                sockaddr[0], sockaddr[1], family=family, limit=READ_CHUNK
            )
        except OSError as exc:
            absent = absent and (exc.errno in _ABSENT or isinstance(exc, ConnectionRefusedError))
            failures.append(f"{peer}: {exc.strerror or exc}")
            continue
        return reader, writer, peer
    if absent:
        raise RasClientError("no_job", "connection_refused", "; ".join(failures))
    raise RasClientError("unreachable", "connect_failed", "; ".join(failures))


async def _reply(reader: asyncio.StreamReader, command: str) -> str:
    try:
        line = await reader.readline()
    except ValueError:
        raise RasClientError("error", "protocol_error", f"overlong reply to {command}") from None
    if not line:
        raise RasClientError("error", "protocol_error", f"connection closed after {command}")
    if not line.endswith(b"\n"):
        raise RasClientError("error", "protocol_error", f"incomplete reply to {command}")
    return line.decode("utf-8", errors="replace").strip()


async def _command(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, command: str, progress: _Progress
) -> str:
    progress.step = command
    writer.write(command.encode() + b"\n")
    await writer.drain()
    return await _reply(reader, command)


async def handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, progress: _Progress
) -> str:
    """``CLIENT PROTOCOL 2`` -> ``SERVER PROTOCOL n``; n, which is accepted whatever it is.

    ncclras itself only warns on a different number and goes on: the number has
    never been bumped, and features are detected by trying them.
    """
    reply = await _command(reader, writer, f"CLIENT PROTOCOL {PROTOCOL}", progress)
    words = reply.split()
    if len(words) != 3 or words[0].upper() != "SERVER" or words[1].upper() != "PROTOCOL":
        raise RasClientError(
            "error", "protocol_error", f"unexpected handshake reply {reply[:80]!r}"
        )
    return words[2][:20]


async def choose_format(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    wanted: str,
    progress: _Progress,
    command: str = "SET FORMAT json",
) -> str:
    """Ask for JSON unless text is wanted; the format the server will use."""
    if wanted == "text":
        return "text"
    reply = await _command(reader, writer, command, progress)
    if reply.upper() == "OK":
        return "json"
    if reply.startswith("ERROR:"):
        if wanted == "json":
            raise RasClientError(
                "error",
                "json_unsupported",
                f"server refused {command} ({reply[:80]}); NCCL < 2.28.7 speaks text only, "
                "set format: auto or text",
            )
        return "text"
    raise RasClientError(
        "error", "protocol_error", f"unexpected reply to {command}: {reply[:80]!r}"
    )


async def _read_body(reader: asyncio.StreamReader, limit: int, progress: _Progress) -> bytes:
    chunks: list[bytes] = []
    progress.step = "reading the report"
    while True:
        try:
            chunk = await reader.read(READ_CHUNK)
        except ConnectionResetError:
            raise RasClientError(
                "error",
                "connection_reset",
                f"connection reset after {progress.received} bytes (the NCCL process died "
                "or closed the socket mid-report)",
            ) from None
        if not chunk:
            break
        progress.received += len(chunk)
        if progress.received > limit:
            raise RasClientError(
                "error", "too_large", f"report exceeds max_response_bytes ({limit} bytes)"
            )
        chunks.append(chunk)
    if not progress.received:
        raise RasClientError("error", "empty_report", "server closed without sending a report")
    return b"".join(chunks)


def _drop(writer: asyncio.StreamWriter | None) -> None:
    if writer is not None:
        writer.transport.abort()


async def query(
    endpoint: Endpoint, options: QueryOptions, resolver: Resolver = system_resolver
) -> RasResponse:
    """Fetch one STATUS report under the deadline; RasClientError on any failure."""
    progress = _Progress()
    started = time.monotonic()

    async def run() -> RasResponse:
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer, peer = await _connect(endpoint, resolver, progress)
            protocol = await handshake(reader, writer, progress)
            reply = await _command(reader, writer, f"TIMEOUT {options.leg_timeout}", progress)
            if reply.upper() != "OK" and not reply.startswith("ERROR:"):
                raise RasClientError("error", "protocol_error", f"unexpected reply {reply[:80]!r}")
            fmt = await choose_format(reader, writer, options.format, progress)
            progress.step = "sending STATUS"
            writer.write(b"VERBOSE STATUS\n" if options.verbose else b"STATUS\n")
            await writer.drain()
            body = await _read_body(reader, options.max_bytes, progress)
            return RasResponse(body, fmt, peer, time.monotonic() - started, protocol)
        except RasClientError:
            raise
        except ConnectionResetError:
            raise RasClientError(
                "error", "connection_reset", f"connection reset while {progress.step}"
            ) from None
        except OSError as exc:
            raise RasClientError("error", "io_error", f"{progress.step}: {exc}") from None
        finally:
            _drop(writer)

    try:
        return await asyncio.wait_for(run(), timeout=options.deadline)
    except asyncio.TimeoutError:
        raise RasClientError(
            "unreachable",
            "timeout",
            f"no complete report within {options.deadline:g}s "
            f"(while {progress.step}, {progress.received} bytes received)",
        ) from None


async def monitor(
    endpoint: Endpoint,
    on_event: Callable[[MonitorEvent], None],
    *,
    groups: str = "all",
    handshake_timeout: float = 10.0,
    resolver: Resolver = system_resolver,
    on_connected: Callable[[str], None] | None = None,
) -> int:
    """Follow the MONITOR stream (2.29.2+) until the server closes it; malformed event count.

    Raises RasClientError: ``no_job`` when nothing listens, ``error`` with reason
    ``unsupported`` when the server does not know MONITOR (before 2.29.2).
    """
    progress = _Progress()
    writer: asyncio.StreamWriter | None = None
    try:

        async def setup() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
            nonlocal writer
            reader, writer, peer = await _connect(endpoint, resolver, progress)
            await handshake(reader, writer, progress)
            await choose_format(reader, writer, "auto", progress)
            reply = await _command(reader, writer, f"MONITOR {groups}", progress)
            if reply.upper() != "OK":
                raise RasClientError("error", "unsupported", f"MONITOR refused: {reply[:80]}")
            return reader, writer, peer

        try:
            reader, _, peer = await asyncio.wait_for(setup(), timeout=handshake_timeout)
        except asyncio.TimeoutError:
            raise RasClientError(
                "unreachable", "timeout", f"MONITOR setup: {progress.step}"
            ) from None
        if on_connected is not None:
            on_connected(peer)
        decoder = MonitorDecoder()
        while True:
            try:
                chunk = await reader.read(READ_CHUNK)
            except ConnectionResetError:
                break
            if not chunk:
                break
            for event in decoder.feed(chunk):
                on_event(event)
        return decoder.malformed
    except OSError as exc:
        raise RasClientError("error", "io_error", f"{progress.step}: {exc}") from None
    finally:
        _drop(writer)
