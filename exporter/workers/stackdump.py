"""Which vendor call a stuck or crashed worker was in, from a Python stack dump.

The breadcrumb (:mod:`exporter.workers.crumb`) says which device; this says
which call, at no cost while nothing goes wrong. The worker arms the standard
library's :mod:`faulthandler` on a file the daemon passed down: on ``SIGUSR1``
(sent by the daemon when a call missed its deadline) and on a fatal signal
(SIGSEGV, SIGABRT, ... inside a vendor library) it writes every thread's stack
from a C signal handler, which works while the main thread sits inside a C
call. The innermost frame of the main thread is the binding function that made
the call (``nvmlDeviceGetPowerUsage``, ``amdsmi_get_power_info``): ctypes calls
add no Python frame of their own.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
from collections.abc import Mapping
from typing import IO

ENV_FD = "ACCEL_EXPORTER_DUMP_FD"
DUMP_SIGNAL = signal.SIGUSR1
# A dump of a few threads is a few KB; more than this is not read.
MAX_DUMP_BYTES = 256 * 1024

_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^  File "(?P<file>.*)", line \d+ in (?P<name>\S+)')

# Kept open for the life of the worker: faulthandler writes to its descriptor.
_armed: IO[str] | None = None


def attach(environ: Mapping[str, str] = os.environ) -> bool:
    """Arm faulthandler on the daemon's dump file (worker side); False when there is none."""
    global _armed
    raw = environ.get(ENV_FD, "")
    if not raw.isdigit():
        return False
    try:
        out = os.fdopen(int(raw), "w", closefd=False)
        faulthandler.enable(file=out, all_threads=True)
        faulthandler.register(DUMP_SIGNAL, file=out, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        return False
    _armed = out
    return True


def fatal_on(text: str, main_thread: int) -> bool:
    """Whether the dump reports a fatal signal (a native crash) on the main thread.

    faulthandler names the thread that received the signal "Current thread";
    a crash on another thread (the event reader) is not the main thread's device's.
    """
    if not text.startswith("Fatal Python error"):
        return False
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head and line.startswith("Current"):
            return not main_thread or int(head.group(1), 16) == main_thread
    return not main_thread


def main_thread_frames(text: str, main_thread: int) -> list[str]:
    """Function names of the main thread's frames, innermost first (empty when not found).

    ``main_thread`` is the thread ident the worker published; when it is 0 or
    absent from the dump, the thread that handled the signal ("Current
    thread") is taken, which for a single-threaded worker is the same. A dump
    with neither is one read while faulthandler was still writing it (it
    writes the other threads first): it names nothing yet, so the daemon reads
    again rather than blame another thread's call (the event reader's wait).
    """
    blocks: list[tuple[int, bool, list[str]]] = []
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head:
            blocks.append((int(head.group(1), 16), line.startswith("Current"), []))
            continue
        frame = _FRAME.match(line)
        if frame and blocks:
            blocks[-1][2].append(frame.group("name"))
    for ident, _current, names in blocks:
        if main_thread and ident == main_thread:
            return names
    for _ident, current, names in blocks:
        if current:
            return names
    return []


def hung_call(text: str, main_thread: int) -> str:
    """The call the main thread was in, or "" when the dump does not say."""
    # A dump read while it is being written may end inside a line.
    frames = main_thread_frames(text[: text.rfind("\n") + 1], main_thread)
    return frames[0] if frames else ""


class DumpFile:
    """The daemon's side: an in-memory file the worker's faulthandler writes to."""

    def __init__(self) -> None:
        # Close-on-exec: the worker gets it through pass_fds, nothing else should.
        self.fd = os.memfd_create("accel-exporter-dump", os.MFD_CLOEXEC)

    def env(self) -> dict[str, str]:
        """Environment entries that tell a worker where to write its dumps."""
        return {ENV_FD: str(self.fd)}

    def clear(self) -> None:
        """Empty the file (the worker's offset is shared with ours: rewind it too)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)

    def read(self) -> str:
        """Everything written since the last :meth:`clear`."""
        try:
            data = os.pread(self.fd, MAX_DUMP_BYTES, 0)
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        """Release the file."""
        with contextlib.suppress(OSError):
            os.close(self.fd)
