"""Open connections of the HTTP listener: their states, deadlines and limits.

A connection is in one of three states. ``waiting``: no byte of a request yet
(a new connection, or a keep-alive one between requests). ``reading``: a
request (or the TLS handshake) has begun and its headers are not complete.
``serving``: a request is being answered. Only ``serving`` can hold a request
slot (``outputs/http.py`` takes it), so a client that connects and says
nothing, or trickles its headers, holds nothing a scrape needs.

Deadlines are totals, enforced by one reaper thread that shuts the socket down
(which wakes the connection's thread blocked in ``recv`` or ``send``). It sleeps
until the earliest deadline, or the next publication of changed counters, and
is woken by every deadline set (so an idle daemon's reaper does not wake at all): a
``reading`` connection gets ``header_timeout`` from its first byte, a new
connection the same to send that byte, a keep-alive one ``idle_timeout``, a
``serving`` one ``write_timeout`` to have its answer read. The number of open
connections is capped, and so is the number of keep-alive ones waiting for
their next request; at a cap the oldest waiting connection is closed first,
then the one that has spent longest on its headers; a new connection is
refused only when every open one is serving.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporter.config.web import WebConfig
from exporter.family_names import (
    ACCEL_EXPORTER_HTTP_AUTH_FAILURES_TOTAL,
    ACCEL_EXPORTER_HTTP_CONNECTIONS_REFUSED_TOTAL,
    ACCEL_EXPORTER_HTTP_HEADER_TIMEOUTS_TOTAL,
    ACCEL_EXPORTER_HTTP_IDLE_CONNECTIONS_CLOSED_TOTAL,
    ACCEL_EXPORTER_HTTP_WRITE_TIMEOUTS_TOTAL,
)
from exporter.model import Reading

WAITING, READING, SERVING = "waiting", "reading", "serving"
# Counters reach the store at most this often: each publication invalidates the
# cached exposition, and under abuse they change all the time.
PUBLISH_EVERY = 1.0

REFUSED = ACCEL_EXPORTER_HTTP_CONNECTIONS_REFUSED_TOTAL
IDLE_CLOSED = ACCEL_EXPORTER_HTTP_IDLE_CONNECTIONS_CLOSED_TOTAL
HEADER_TIMEOUTS = ACCEL_EXPORTER_HTTP_HEADER_TIMEOUTS_TOTAL
WRITE_TIMEOUTS = ACCEL_EXPORTER_HTTP_WRITE_TIMEOUTS_TOTAL
AUTH_FAILURES = ACCEL_EXPORTER_HTTP_AUTH_FAILURES_TOTAL
REFUSED_LIMITS = ("connections", "requests", "auth")
IDLE_REASONS = ("timeout", "limit")
AUTH_REASONS = ("missing", "malformed", "rejected")


class HttpCounters:
    """The listener's abuse counters; one per daemon, kept across reloads and listener swaps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, tuple[str, ...]], float] = {}
        for limit in REFUSED_LIMITS:
            self._counts[(REFUSED, (limit,))] = 0.0
        for reason in IDLE_REASONS:
            self._counts[(IDLE_CLOSED, (reason,))] = 0.0
        self._counts[(HEADER_TIMEOUTS, ())] = 0.0
        self._counts[(WRITE_TIMEOUTS, ())] = 0.0
        for reason in AUTH_REASONS:
            self._counts[(AUTH_FAILURES, (reason,))] = 0.0
        self._changes = 0
        self._published = -1

    def add(self, metric: str, *labels: str) -> None:
        """Count one event."""
        with self._lock:
            self._counts[(metric, labels)] += 1.0
            self._changes += 1

    def unpublished(self) -> bool:
        """Whether anything was counted since the last :meth:`changed`."""
        with self._lock:
            return self._changes != self._published

    def get(self, metric: str, *labels: str) -> float:
        """The current count of one series."""
        with self._lock:
            return self._counts[(metric, labels)]

    def changed(self) -> Sequence[Reading] | None:
        """The readings, when anything was counted since the last call; else None."""
        with self._lock:
            if self._changes == self._published:
                return None
            self._published = self._changes
            return [Reading(m, labels, v) for (m, labels), v in self._counts.items()]


@dataclass(eq=False)
class Conn:
    """One open connection (its state is only changed under ``Connections``' lock)."""

    sock: socket.socket
    state: str = WAITING
    since: float = 0.0
    deadline: float = 0.0
    # Whether it has served a request (a waiting connection is then a keep-alive one).
    served: bool = False
    closed: bool = False
    # Set by whoever closed it early, so the thread does not count it again.
    reason: str = ""
    slots: list[threading.Semaphore] = field(default_factory=list)


class Connections:
    """Tracks every open connection and enforces the connection limits and deadlines."""

    def __init__(
        self,
        config: WebConfig,
        counters: HttpCounters,
        publish: Callable[[Sequence[Reading]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.counters = counters
        self._publish = publish
        self._clock = clock
        self._lock = threading.Lock()
        # Notified (lock held) whenever a deadline is set or a connection goes: the
        # reaper sleeps until the earliest deadline instead of polling for it.
        self._changed = threading.Condition(self._lock)
        self._open: dict[int, Conn] = {}
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._last_publish = -PUBLISH_EVERY

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def counts(self) -> dict[str, int]:
        """Open connections by state (for /status and tests)."""
        with self._lock:
            out = dict.fromkeys((WAITING, READING, SERVING), 0)
            for conn in self._open.values():
                out[conn.state] += 1
            return out

    def start(self) -> None:
        """Start the reaper thread."""
        self._reaper = threading.Thread(target=self._reap_forever, name="http-reaper", daemon=True)
        self._reaper.start()

    def stop(self) -> None:
        """Stop the reaper and close every connection."""
        self._stop.set()
        with self._lock:
            self._changed.notify()
        if self._reaper is not None:
            self._reaper.join(timeout=2.0)
        with self._lock:
            for conn in list(self._open.values()):
                self._close(conn, "")

    def admit(self, sock: socket.socket) -> Conn | None:
        """Register a new connection, making room if needed; None when every one is serving."""
        now = self._clock()
        with self._lock:
            if len(self._open) >= self.config.max_connections and not self._evict():
                self.counters.add(REFUSED, "connections")
                return None
            conn = Conn(sock, WAITING, now, now + self.config.header_timeout)
            self._open[id(conn)] = conn
            self._changed.notify()
            return conn

    def replace_socket(self, conn: Conn, sock: socket.socket) -> bool:
        """The socket is now ``sock`` (its TLS wrapper); False when closed meanwhile."""
        with self._lock:
            conn.sock = sock
            return not conn.closed

    def reading(self, conn: Conn) -> bool:
        """The connection's request has begun: its headers are due within the header timeout.

        False when the connection was closed meanwhile.
        """
        with self._lock:
            return self._enter(conn, READING, self.config.header_timeout)

    def serving(self, conn: Conn) -> bool:
        """The headers are complete; False when the connection was closed meanwhile."""
        with self._lock:
            if not self._enter(conn, SERVING, self.config.write_timeout):
                return False
            conn.served = True
            return True

    def waiting(self, conn: Conn) -> bool:
        """Back to keep-alive idle after a response; False when it should close instead."""
        with self._lock:
            if not self._enter(conn, WAITING, self.config.idle_timeout):
                return False
            self._trim_idle()
            return not conn.closed

    def _enter(self, conn: Conn, state: str, timeout: float) -> bool:
        """Under the lock: ``conn`` is in ``state`` from now, for ``timeout``; False if closed."""
        if conn.closed:
            return False
        now = self._clock()
        conn.state, conn.since, conn.deadline = state, now, now + timeout
        self._changed.notify()
        return True

    def closed_early(self, conn: Conn) -> bool:
        """Whether the limits or a deadline closed this connection (not its client)."""
        with self._lock:
            return bool(conn.reason)

    def release(self, conn: Conn) -> None:
        """Forget a connection whose thread has finished with it."""
        with self._lock:
            self._open.pop(id(conn), None)
            conn.closed = True
            # It may have counted something (an auth failure): publish it when due.
            self._changed.notify()

    def reap(self) -> None:
        """Close the connections past their deadline; publish the counters when due."""
        now = self._clock()
        with self._lock:
            for conn in list(self._open.values()):
                if now >= conn.deadline:
                    self._close(conn, "timeout")
        if now - self._last_publish >= PUBLISH_EVERY:
            self.publish()

    def publish(self) -> None:
        """Put the counters into the store when they changed."""
        self._last_publish = self._clock()
        readings = self.counters.changed()
        if readings is not None and self._publish is not None:
            self._publish(readings)

    def next_wake(self) -> float | None:
        """Seconds until the reaper has something to do (lock held); None: nothing ever.

        The earliest deadline of an open connection, and the next publication when
        counters changed since the last one.
        """
        due = [conn.deadline for conn in self._open.values()]
        if self.counters.unpublished():
            due.append(self._last_publish + PUBLISH_EVERY)
        return max(0.0, min(due) - self._clock()) if due else None

    def _reap_forever(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                wait = self.next_wake()
                if wait is None or wait > 0:
                    self._changed.wait(wait)
                    continue  # woken by a change, or the time came: look again
            self.reap()

    def _idle(self, count: int, keep_alive: bool = False) -> list[Conn]:
        """Up to ``count`` waiting connections with nothing to read, oldest first (lock held).

        One whose request already arrived (its thread has not picked it up yet,
        as in a burst of new scrapers) is not idle, whatever its state says. The
        oldest are looked at first and no further than needed: under churn this
        runs for every new connection. ``keep_alive``: only those that served a request.
        """
        waiting = sorted(
            (c for c in self._open.values() if c.state == WAITING and (c.served or not keep_alive)),
            key=lambda c: c.since,
        )
        idle: list[Conn] = []
        for conn in waiting:
            if len(idle) >= count:
                break
            if not _readable(conn.sock):
                idle.append(conn)
        return idle

    def _evict(self) -> bool:
        """Close one connection that holds nothing (lock held); False when there is none."""
        idle = self._idle(1)
        if idle:
            self._close(idle[0], "limit")
            return True
        reading = [c for c in self._open.values() if c.state == READING]
        if reading:
            self._close(min(reading, key=lambda c: c.since), "limit")
            return True
        return False

    def _trim_idle(self) -> None:
        """Keep-alive connections beyond ``max_idle_connections``: the oldest close (lock held).

        New connections are not counted: ``header_timeout`` and the connection
        cap bound them, and closing them early only makes their senders reconnect.
        """
        kept = sum(1 for c in self._open.values() if c.state == WAITING and c.served)
        excess = kept - self.config.max_idle_connections
        if excess > 0:
            for conn in self._idle(excess, keep_alive=True):
                self._close(conn, "limit")

    def _close(self, conn: Conn, reason: str) -> None:
        """Shut the socket down so the connection's blocked thread wakes up (lock held).

        The socket itself is closed by that thread; ``socket.socket.shutdown`` is
        called on the base class so a TLS socket is shut without its TLS layer
        being torn down under a concurrent read.
        """
        if conn.closed:
            return
        conn.closed = True
        self._open.pop(id(conn), None)
        if reason:
            conn.reason = reason
            if conn.state == READING:
                self.counters.add(HEADER_TIMEOUTS)
            elif conn.state == WAITING:
                self.counters.add(IDLE_CLOSED, reason)
            else:
                self.counters.add(WRITE_TIMEOUTS)
        with contextlib.suppress(OSError):
            socket.socket.shutdown(conn.sock, socket.SHUT_RDWR)


def _readable(sock: socket.socket) -> bool:
    """Whether the socket has bytes (or an EOF) to read now; never blocks."""
    try:
        fd = sock.fileno()
        if fd < 0:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False
