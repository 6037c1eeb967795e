"""An asyncio RAS server speaking the client protocol of one NCCL/RCCL release family.

Families (what the server understands, from ``client_support.cc`` at those tags):

- ``"2.24"``: text only, 2.24/2.25 wording; ``SET FORMAT`` and ``MONITOR`` are unknown
- ``"2.26"`` (2.26 .. 2.28.3): text only; ``SET FORMAT`` -> ``ERROR: Unknown command ...``
- ``"2.28.9"`` (2.28.7 .. 2.28.9): ``SET FORMAT json`` works and the JSON lacks the comma
  after ``nvml_dev`` in missing ranks; ``MONITOR`` is unknown
- ``"2.29"`` (2.29.2+): valid JSON and ``MONITOR``

The report is generated from a :class:`FakeJob` at each query (so a test can
move op counts between polls) or replayed verbatim (a real capture). Faults:
``stall`` (stop after ``Communicators...`` and keep the socket open), ``reset``
(RST mid-report), ``garbage``, ``huge`` (50 MB), ``never_close`` (whole report,
no EOF), ``truncated`` (clean close mid-report), ``bad_handshake``, ``silent``
(accept and never answer). :class:`ThreadedFakeRas` runs one in a thread for
tests that drive the daemon as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from tests.helpers.ras_reports import FakeJob, json_report, text_chunks

JSON_FAMILIES = ("2.28.9", "2.29")
HUGE_BYTES = 50 * 1024 * 1024


def _split_text(text: str) -> list[str]:
    """A replayed text report in the chunks a server sends around 'Communicators...'."""
    marker = "\nCommunicators..."
    index = text.find(marker)
    if index < 0:
        return [text]
    end = index + len(marker)
    return [text[:index], text[index:end], text[end:]]


class FakeRasServer:
    """One listening socket; every connection is served by the configured family."""

    def __init__(
        self,
        family: str = "2.29",
        job: FakeJob | None = None,
        *,
        text: str | None = None,
        json_text: str | None = None,
        host: str = "127.0.0.1",
        fault: str | None = None,
        collective_delay: float = 0.0,
        protocol: str = "2",
    ) -> None:
        self.family = family
        self.job = job
        self.text = text
        self.json_text = json_text
        self.host = host
        self.fault = fault
        self.collective_delay = collective_delay
        self.protocol = protocol  # the number in SERVER PROTOCOL (2 in every release)
        self.commands: list[str] = []
        self.connections = 0
        self.reports = 0
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._monitors: list[tuple[asyncio.StreamWriter, str]] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._stop = asyncio.Event()

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self, port: int = 0) -> FakeRasServer:
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(self._client, self.host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- events ----------------------------------------------------------------------------

    def emit(self, event: str, host: str = "10.0.0.2", pid: int = 4242, details: str = "") -> int:
        """Send one MONITOR event to every monitoring client; how many got it."""
        sent = 0
        for writer, fmt in list(self._monitors):
            if writer.is_closing():
                continue
            if fmt == "json":
                payload = (
                    "{\n"
                    '  "timestamp": "2025-12-19 13:07:07",\n'
                    '  "group": "LIFECYCLE",\n'
                    f'  "event": "{event}",\n'
                    '  "peer": {\n'
                    f'    "host": "{host}",\n'
                    f'    "pid": {pid},\n'
                    '    "cuda_devs": [1],\n'
                    '    "nvml_devs": [1]\n'
                    "  },\n"
                    f'  "details": "{details}"\n'
                    "}\n"
                )
            else:
                payload = (
                    f"[2025-12-19 13:07:07] {event}: Process {pid} on node {host} "
                    f"managing GPU 1 {details}\n"
                )
            writer.write(payload.encode())
            sent += 1
        return sent

    @property
    def monitoring(self) -> int:
        return sum(1 for w, _ in self._monitors if not w.is_closing())

    # -- protocol ----------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        fmt = "text"
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                command = line.decode(errors="replace").rstrip("\n").rstrip("\r")
                self.commands.append(command)
                low = command.lower()
                if self.fault == "silent":
                    continue
                if low.startswith("client protocol "):
                    reply = (
                        "HELLO\n"
                        if self.fault == "bad_handshake"
                        else f"SERVER PROTOCOL {self.protocol}\n"
                    )
                elif low.startswith("timeout "):
                    value = command[len("timeout ") :]
                    ok = value.isdigit()
                    reply = "OK\n" if ok else f"ERROR: Invalid timeout value {value}\n"
                elif low.startswith("set format ") and self.family in JSON_FAMILIES:
                    wanted = low[len("set format ") :]
                    if wanted in ("json", "text"):
                        fmt = wanted
                        reply = "OK\n"
                    else:
                        reply = f"ERROR: Invalid format {command[len('set format ') :]}\n"
                elif low in ("status", "verbose status"):
                    await self._report(writer, fmt, verbose=low.startswith("verbose"))
                    return
                elif (low == "monitor" or low.startswith("monitor ")) and self.family == "2.29":
                    writer.write(b"OK\n")
                    await writer.drain()
                    self._monitors.append((writer, fmt))
                    await self._stop.wait()
                    return
                else:
                    reply = f"ERROR: Unknown command {command}\n"
                writer.write(reply.encode())
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            self._monitors = [(w, f) for w, f in self._monitors if w is not writer]
            if not writer.is_closing():
                writer.close()

    def _chunks(self, fmt: str, verbose: bool) -> list[str]:
        if fmt == "json":
            if self.json_text is not None:
                return [self.json_text]
            assert self.job is not None, "a JSON family needs a job or json_text"
            return [json_report(self.job, missing_comma_bug=self.family == "2.28.9")]
        if self.text is not None:
            return _split_text(self.text)
        assert self.job is not None, "a text report needs a job or text"
        style = "2.24" if self.family == "2.24" else ("2.26" if self.family == "2.26" else "2.28.7")
        return text_chunks(self.job, verbose=verbose, style=style)

    async def _collective(self) -> bool:
        """The job-wide RAS collective; False when it never ends (fault ``stall``)."""
        if self.fault == "stall":
            await self._stop.wait()
            return False
        if self.collective_delay:
            await asyncio.sleep(self.collective_delay)
        return True

    async def _report(self, writer: asyncio.StreamWriter, fmt: str, verbose: bool) -> None:
        self.reports += 1
        if self.fault == "garbage":
            rng = random.Random(self.reports)
            writer.write(bytes(rng.randrange(256) for _ in range(4096)))
            await writer.drain()
            writer.close()
            return
        if self.fault == "huge":
            line = b"  Rank 1 -- GPU 0 managed by process 1 on node 10.0.0.1\n" * 1024
            sent = 0
            while sent < HUGE_BYTES:
                writer.write(line)
                sent += len(line)
                await writer.drain()
            writer.close()
            return
        chunks = self._chunks(fmt, verbose)
        body = "".join(chunks)
        if self.fault == "reset":
            writer.write(body[: len(body) // 2].encode())
            await writer.drain()
            await asyncio.sleep(0.05)
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        if self.fault == "truncated":
            writer.write(body[: len(body) // 2].encode())
            await writer.drain()
            writer.close()
            return
        if fmt == "json" and not await self._collective():
            return
        for chunk in chunks:
            writer.write(chunk.encode())
            await writer.drain()
            if chunk.startswith("\nCommunicators...") and not await self._collective():
                return
        if self.fault == "never_close":
            await self._stop.wait()
            return
        writer.close()


class ThreadedFakeRas:
    """A FakeRasServer on its own event loop thread (for daemon-subprocess tests)."""

    def __init__(self, *args: Any, port: int = 0, **kwargs: Any) -> None:
        self._args, self._kwargs, self._port = args, kwargs, port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: FakeRasServer | None = None

    def __enter__(self) -> FakeRasServer:
        self.thread.start()
        self.server = self.call(self._start)
        return self.server

    async def _start(self) -> FakeRasServer:
        return await FakeRasServer(*self._args, **self._kwargs).start(self._port)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run a coroutine function (or plain function) on the server's loop; its result."""

        async def wrapper() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout=30)

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.call(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for 'no job' cases)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def dumps_events(events: list[dict[str, Any]]) -> str:
    """Pretty-printed event objects back to back, as the server writes them."""
    return "".join(json.dumps(e, indent=2) + "\n" for e in events)
