"""Breadcrumbs, the backend's side: which device a worker is touching, for the daemon to read.

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
every call still works. The daemon's side (reading the page) is
:mod:`exporter.workers.crumb`.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

ENV_FD = "ACCEL_EXPORTER_CRUMB_FD"
CRUMB_BYTES = 128
HEAD = struct.Struct("=iiQq")
TEXT_BYTES = CRUMB_BYTES - HEAD.size
# Room for the topology: about 40 bytes per device, over a thousand devices.
TOPOLOGY_BYTES = 49152
LENGTH = struct.Struct("=I")
LEARNT_AT = CRUMB_BYTES + LENGTH.size + TOPOLOGY_BYTES
# Enough for the largest node we know of (64 partitions, 16 GPUs x 8 NICs...) many times over.
LEARNT_DEVICES = 1024
SLOT_BYTES = LENGTH.size + TEXT_BYTES
PAGE_BYTES = LEARNT_AT + LEARNT_DEVICES * SLOT_BYTES

# The worker's page: shared with the daemon once attach() found the fd, else private.
# Private, it is an anonymous mapping rather than a bytearray: a page of it is resident
# only once written, and the daemon, which imports this module and never writes here,
# would otherwise hold 156 KiB of zeros (bench/idle.py).
_page: mmap.mmap | bytearray = mmap.mmap(-1, PAGE_BYTES)
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
    HEAD.pack_into(page, 0, 0, 0, threading.main_thread().ident or 0, 0)
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
    _page[HEAD.size : HEAD.size + len(data)] = data
    index = _slot[0] - 1
    if 0 <= index < LEARNT_DEVICES:
        at = LEARNT_AT + index * SLOT_BYTES
        _page[at + LENGTH.size : at + LENGTH.size + len(data)] = data
        _page[at : at + LENGTH.size] = LENGTH.pack(len(data))


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
    _page[CRUMB_BYTES + LENGTH.size : CRUMB_BYTES + LENGTH.size + len(data)] = data
    _page[CRUMB_BYTES : CRUMB_BYTES + LENGTH.size] = LENGTH.pack(len(data))


def physical_key(text: str) -> str:
    """A PCI address without its function (``0000:0c:00.3`` -> ``0000:0c:00``), lowercased.

    The partitions of one AMD GPU differ only in the function number.
    """
    key = text.strip().lower()
    head, dot, function = key.rpartition(".")
    return head if dot and head.count(":") == 2 and function.isdigit() else key


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
