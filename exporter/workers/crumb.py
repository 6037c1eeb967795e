"""Breadcrumbs, the daemon's side: the page a worker shares, read after a missed deadline.

What a backend writes there and the page's layout: :mod:`exporter.backend_api.crumb`.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import time
from dataclasses import dataclass

from exporter.backend_api.crumb import (
    CRUMB_BYTES,
    ENV_FD,
    HEAD,
    LEARNT_AT,
    LEARNT_DEVICES,
    LENGTH,
    PAGE_BYTES,
    SLOT_BYTES,
    TEXT_BYTES,
    TOPOLOGY_BYTES,
)


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
        self._map[0 : CRUMB_BYTES + LENGTH.size] = bytes(CRUMB_BYTES + LENGTH.size)
        self.forget_learnt()

    def forget_learnt(self) -> None:
        """Zero the learnt identities, giving their memory back (once an inventory names all).

        The slots are most of the page (1,024 devices' worth). Writing zeros over them
        made every page of them resident in the daemon for its whole life (0.2 MiB a
        worker, bench/idle.py); the whole pages among them are handed back to the
        kernel instead, and read as zeros until a worker writes there again.
        """
        start, end = LEARNT_AT, PAGE_BYTES
        first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        last = end // mmap.PAGESIZE * mmap.PAGESIZE
        if first < last and hasattr(mmap, "MADV_REMOVE"):
            try:
                self._map.madvise(mmap.MADV_REMOVE, first, last - first)
            except OSError:
                pass
            else:
                self._map[start:first] = bytes(first - start)
                self._map[last:end] = bytes(end - last)
                return
        self._map[start:end] = bytes(end - start)

    def learnt(self) -> dict[int, str]:
        """Identity text of each device the worker has identified, by library index.

        The device the worker is on is left out: it may be the one that hangs.
        """
        current = self.read().index
        out = {}
        for index in range(LEARNT_DEVICES):
            at = LEARNT_AT + index * SLOT_BYTES
            (length,) = LENGTH.unpack_from(self._map, at)
            if 0 < length <= TEXT_BYTES and index != current:
                start = at + LENGTH.size
                out[index] = self._map[start : start + length].decode("utf-8", "replace")
        return out

    def parents(self) -> list[str]:
        """The topology the worker recorded (a parent key per library index), or []."""
        (length,) = LENGTH.unpack_from(self._map, CRUMB_BYTES)
        if not 0 < length <= TOPOLOGY_BYTES:
            return []
        start = CRUMB_BYTES + LENGTH.size
        try:
            parents = json.loads(self._map[start : start + length])
        except ValueError:
            return []
        if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
            return []
        return parents

    def read(self) -> Crumb:
        """What the worker last said: the device it was touching, its identity, its main thread."""
        index, length, thread, since = HEAD.unpack_from(self._map, 0)
        text = ""
        if 0 < length <= TEXT_BYTES:
            text = self._map[HEAD.size : HEAD.size + length].decode("utf-8", "replace")
        held = max(0.0, (time.monotonic_ns() - since) / 1e9) if since else 0.0
        return Crumb(index - 1 if index > 0 else None, text, thread, held)

    def close(self) -> None:
        """Release the page."""
        with contextlib.suppress(Exception):
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
