"""Breadcrumbs: which device a worker is touching, readable by the daemon after a hang.

A vendor call that hangs blocks the worker's only thread, so the worker cannot
say which GPU hung. Before touching device ``i`` (bootstrap identification or a
poll) a backend calls :func:`device`; the worker writes ``i`` into a small page
it shares with the daemon (a memfd the daemon created and passed down). When a
call misses its deadline the daemon reads the page before it kills the worker:
the culprit is named without any cooperation from the stuck process, and the
worker is restarted without that device while a separate probe retries it.

The write is one store into a shared buffer (tens of nanoseconds), made once
per device per poll, not per vendor call; which call hung is learnt from a
Python stack dump only when something did hang (see the runner).

Layout of the page: ``int32`` device index + 1 (0: no device), ``int32`` length
of the identity text, ``uint64`` ident of the worker's main thread (to find its
stack in a dump of every thread), ``int64`` CLOCK_MONOTONIC nanoseconds when the
current device was entered (so a poll that is merely slow overall, spread over
every device, does not get the device it happened to be on blamed), then up to
:data:`TEXT_BYTES` bytes of UTF-8 identity (the PCI bus id or uuid learnt so
far, so a device that hangs while being identified can still be named).

After the page comes the *topology*: which physical device each library index
belongs to (the partitions of one MI300X, say), written once at bootstrap
before any device is touched, from calls the library answers without asking a
device (amdsmi's sockets). A hang on one partition then isolates its whole
physical GPU in one deadline, siblings not identified yet included. Layout:
``uint32`` length, then that many bytes of a JSON list of parent keys, one per
library index; length 0: the backend did not say (each device is its own).

After the topology come the *learnt identities*: one slot per library index (the
first :data:`LEARNT_DEVICES`), ``uint32`` length then up to :data:`TEXT_BYTES` of
the identity text :func:`identity` last recorded for that device. A bootstrap that
hangs on one device has said what it learnt of the others before it: the daemon
shows those devices while the culprit is still being found (the last device
entered is left out while the worker is on it, it may be the culprit). Only
identification writes here, so a poll costs nothing more.

Outside a worker (unit tests, ``python -c``) the page is private memory and
every call still works.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENV_FD = "ACCEL_EXPORTER_CRUMB_FD"
CRUMB_BYTES = 128
_HEAD = struct.Struct("=iiQq")
TEXT_BYTES = CRUMB_BYTES - _HEAD.size
# Room for the topology: about 40 bytes per device, over a thousand devices.
TOPOLOGY_BYTES = 49152
_LENGTH = struct.Struct("=I")
LEARNT_AT = CRUMB_BYTES + _LENGTH.size + TOPOLOGY_BYTES
# Enough for the largest node we know of (64 partitions, 16 GPUs x 8 NICs...) many times over.
LEARNT_DEVICES = 1024
_SLOT_BYTES = _LENGTH.size + TEXT_BYTES
PAGE_BYTES = LEARNT_AT + LEARNT_DEVICES * _SLOT_BYTES

# The worker's page: shared with the daemon once attach() found the fd, else private.
_page: mmap.mmap | bytearray = bytearray(PAGE_BYTES)
_slot = memoryview(_page)[0:4].cast("i")
_since = memoryview(_page)[16:24].cast("q")


def attach(environ: Mapping[str, str] = os.environ) -> bool:
    """Map the page the daemon passed down (worker side); False when there is none."""
    global _page, _slot, _since
    raw = environ.get(ENV_FD, "")
    if not raw.isdigit():
        return False
    try:
        page = mmap.mmap(int(raw), PAGE_BYTES)
    except (OSError, ValueError):
        return False
    _page = page
    _slot = memoryview(page)[0:4].cast("i")
    _since = memoryview(page)[16:24].cast("q")
    _HEAD.pack_into(page, 0, 0, 0, threading.main_thread().ident or 0, 0)
    return True


def device(index: int) -> None:
    """Say that every vendor call from now on concerns device ``index`` (library order)."""
    _since[0] = time.monotonic_ns()
    _slot[0] = index + 1
    _page[4:8] = b"\0\0\0\0"


def identity(text: str) -> None:
    """Record what is known of the current device's identity (PCI bus id, uuid).

    Kept for the daemon twice: as the current device's (to name it if it hangs)
    and in the device's learnt slot (to show it while the bootstrap goes on).
    """
    data = text.encode("utf-8", "replace")[:TEXT_BYTES]
    _page[4:8] = struct.pack("=i", len(data))
    _page[_HEAD.size : _HEAD.size + len(data)] = data
    index = _slot[0] - 1
    if 0 <= index < LEARNT_DEVICES:
        at = LEARNT_AT + index * _SLOT_BYTES
        _page[at + _LENGTH.size : at + _LENGTH.size + len(data)] = data
        _page[at : at + _LENGTH.size] = _LENGTH.pack(len(data))


def clear() -> None:
    """No device is being touched (system-wide calls, or between polls)."""
    _slot[0] = 0


def topology(parents: Sequence[str]) -> None:
    """Record the physical device of every library index (before touching any device).

    Left unrecorded (too long for the page) rather than cut short: a partial
    list would put a device's siblings on the wrong side of an isolation.
    """
    data = json.dumps(list(parents), separators=(",", ":")).encode()
    if len(data) > TOPOLOGY_BYTES:
        data = b""
    _page[CRUMB_BYTES + _LENGTH.size : CRUMB_BYTES + _LENGTH.size + len(data)] = data
    _page[CRUMB_BYTES : CRUMB_BYTES + _LENGTH.size] = _LENGTH.pack(len(data))


def physical_key(text: str) -> str:
    """A PCI address without its function (``0000:0c:00.3`` -> ``0000:0c:00``), lowercased.

    The partitions of one AMD GPU differ only in the function number.
    """
    key = text.strip().lower()
    head, dot, function = key.rpartition(".")
    return head if dot and head.count(":") == 2 and function.isdigit() else key


@dataclass(frozen=True)
class Crumb:
    """The page as the daemon reads it."""

    index: int | None  # library index of the device being touched; None: no device
    identity: str  # what the worker learnt of that device's identity so far
    main_thread: int  # ident of the worker's main thread (0: not attached yet)
    held: float  # seconds since the worker entered that device


class Page:
    """The daemon's side: creates the shared page and reads it after a missed deadline."""

    def __init__(self) -> None:
        # Close-on-exec: the worker gets it through pass_fds, nothing else should.
        self.fd = os.memfd_create("accel-exporter-crumb", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, PAGE_BYTES)
        self._map = mmap.mmap(self.fd, PAGE_BYTES)

    def env(self) -> dict[str, str]:
        """Environment entries that tell a worker where its page is."""
        return {ENV_FD: str(self.fd)}

    def reset(self) -> None:
        """Forget the previous worker's crumb before a new one starts."""
        self._map[0 : CRUMB_BYTES + _LENGTH.size] = bytes(CRUMB_BYTES + _LENGTH.size)
        self._map[LEARNT_AT:PAGE_BYTES] = bytes(PAGE_BYTES - LEARNT_AT)

    def learnt(self) -> dict[int, str]:
        """Identity text of each device the worker has identified, by library index.

        The device the worker is on is left out: it may be the one that hangs.
        """
        current = self.read().index
        out = {}
        for index in range(LEARNT_DEVICES):
            at = LEARNT_AT + index * _SLOT_BYTES
            (length,) = _LENGTH.unpack_from(self._map, at)
            if 0 < length <= TEXT_BYTES and index != current:
                start = at + _LENGTH.size
                out[index] = self._map[start : start + length].decode("utf-8", "replace")
        return out

    def parents(self) -> list[str]:
        """The topology the worker recorded (a parent key per library index), or []."""
        (length,) = _LENGTH.unpack_from(self._map, CRUMB_BYTES)
        if not 0 < length <= TOPOLOGY_BYTES:
            return []
        start = CRUMB_BYTES + _LENGTH.size
        try:
            parents = json.loads(self._map[start : start + length])
        except ValueError:
            return []
        if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
            return []
        return parents

    def read(self) -> Crumb:
        """What the worker last said: the device it was touching, its identity, its main thread."""
        index, length, thread, since = _HEAD.unpack_from(self._map, 0)
        text = ""
        if 0 < length <= TEXT_BYTES:
            text = self._map[_HEAD.size : _HEAD.size + length].decode("utf-8", "replace")
        held = max(0.0, (time.monotonic_ns() - since) / 1e9) if since else 0.0
        return Crumb(index - 1 if index > 0 else None, text, thread, held)

    def close(self) -> None:
        """Release the page."""
        with contextlib.suppress(Exception):
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


# -- which devices a worker serves ---------------------------------------------------

# Key of the backend config that restricts a worker to some devices.
ISOLATION_KEY = "isolation"


def wanted(config: Mapping[str, Any], count: int) -> list[int]:
    """The library indices of the devices this worker should serve, of ``count`` enumerated.

    The daemon sets ``config["isolation"]`` to ``{"skip": [i, ...]}`` for the
    main worker (devices quarantined after a hang) or ``{"only": [i]}`` for a
    probe of one quarantined device. A backend enumerates only these, calling
    :func:`device` before it touches each one.
    """
    rules = config.get(ISOLATION_KEY) or {}
    only: Sequence[int] | None = rules.get("only")
    skip = set(rules.get("skip") or ())
    indices = range(count) if only is None else [i for i in only if 0 <= i < count]
    return [i for i in indices if i not in skip]
