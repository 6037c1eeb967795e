"""Connections an attacker on the same segment would open: idle ones and trickling ones.

``Abuse`` keeps ``idle`` connections open that never send a byte and
``trickle`` connections that send a request line and then one header line
every ``every`` seconds, never finishing. A connection the server closes is
opened again after ``reopen_after`` seconds, so the pressure lasts as long as
the context. Two threads in all (selectors), loopback only; everything is
closed on exit.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType


@dataclass
class AbuseStats:
    """What the abusers saw."""

    opened: int = 0
    closed_by_server: int = 0
    header_lines: int = 0
    refused: int = 0


@dataclass
class _Slot:
    sock: socket.socket | None = None
    reopen_at: float = 0.0
    next_line: float = 0.0
    lines: int = 0


@dataclass
class Abuse:
    """Idle and trickling connections against ``host:port`` while the context runs."""

    host: str
    port: int
    idle: int = 200
    trickle: int = 40
    every: float = 0.5
    reopen_after: float = 1.0
    stats: AbuseStats = field(default_factory=AbuseStats)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(self.idle, False), daemon=True),
            threading.Thread(target=self._run, args=(self.trickle, True), daemon=True),
        ]

    def __enter__(self) -> Abuse:
        for t in self._threads:
            t.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def _open(self, slot: _Slot, sel: selectors.BaseSelector, trickle: bool) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=2)
        except OSError:
            with self._lock:
                self.stats.refused += 1
            slot.reopen_at = time.monotonic() + self.reopen_after
            return
        sock.setblocking(False)
        slot.sock, slot.lines = sock, 0
        sel.register(sock, selectors.EVENT_READ, slot)
        with self._lock:
            self.stats.opened += 1
        if trickle:
            self._send(slot, sel, b"GET /metrics HTTP/1.1\r\n")
            slot.next_line = time.monotonic() + self.every

    def _drop(self, slot: _Slot, sel: selectors.BaseSelector, by_server: bool) -> None:
        if slot.sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(slot.sock)
        slot.sock.close()
        slot.sock = None
        slot.reopen_at = time.monotonic() + self.reopen_after
        if by_server:
            with self._lock:
                self.stats.closed_by_server += 1

    def _send(self, slot: _Slot, sel: selectors.BaseSelector, data: bytes) -> None:
        assert slot.sock is not None
        try:
            slot.sock.send(data)
        except OSError:
            self._drop(slot, sel, True)

    def _run(self, count: int, trickle: bool) -> None:
        slots = [_Slot() for _ in range(count)]
        with selectors.DefaultSelector() as sel:
            for slot in slots:
                self._open(slot, sel, trickle)
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.05):
                    slot = key.data
                    # Whatever the server sends (a 503, an EOF) ends this connection.
                    try:
                        data = key.fileobj.recv(4096)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data or b"\r\n\r\n" in data or b"HTTP/1.1" in data:
                        self._drop(slot, sel, True)
                now = time.monotonic()
                for slot in slots:
                    if slot.sock is None:
                        if now >= slot.reopen_at and not self._stop.is_set():
                            self._open(slot, sel, trickle)
                    elif trickle and now >= slot.next_line:
                        slot.lines += 1
                        self._send(slot, sel, b"X-Trickle-%d: x\r\n" % slot.lines)
                        slot.next_line = now + self.every
                        with self._lock:
                            self.stats.header_lines += 1
            for slot in slots:
                self._drop(slot, sel, False)
