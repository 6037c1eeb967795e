"""Follow the line-oriented files of a directory by per-file offsets (blocking I/O).

Each call reads what every matching file gained since the previous call and
hands over complete lines; a partial last line waits for its newline. A file
is known by its identity: device, inode, and a fingerprint of its first
``FINGERPRINT`` bytes. A new device or inode under the same name was replaced;
the same inode that shrank, or whose first bytes changed, was truncated (and
maybe refilled past its old size, as logrotate's ``copytruncate`` and a
restarted writer do between two calls): either way it is read again from the
start, and counted. A vanished file is forgotten.

Memory and work per call are bounded: at most ``max_read_bytes`` per file
(an older backlog is skipped and counted), a partial line of at most
``max_line_bytes`` (a longer one is dropped up to its newline, also counted),
and at most ``max_files`` files (the most recently modified).

The directory is writable by jobs and the exporter may read it as root, so only
regular files are read: a symlink is never followed (``O_NOFOLLOW``), and a FIFO
or device is never waited on (``O_NONBLOCK``, then ``fstat`` must say regular
file, which also closes the race of a name swapped after the listing). Each
refusal is counted by reason (``REFUSED``), every call that finds it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import BinaryIO

BLOCK = 1024 * 1024
# Several Inspector records (each carries its sequence number and dump
# timestamp), so a refill by the same process differs within them; one that
# repeats these bytes exactly goes unnoticed. One 4 KiB read per changed file.
FINGERPRINT = 4096
REFUSED = ("symlink", "not_regular")
"""Why a matching name was not read: a symbolic link, or not a regular file."""
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Refused(Exception):
    """A matching name that is not a regular file of the directory."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _File:
    identity: tuple[int, int]
    offset: int = 0
    # The first bytes as read (up to FINGERPRINT); fewer while the file is shorter.
    head: bytes = b""
    mtime_ns: int = 0
    partial: bytearray = field(default_factory=bytearray)
    # True while dropping the rest of a line that was too long (or skipped into).
    discarding: bool = False


@dataclass
class TailStats:
    """What one call did."""

    files: int = 0
    lines: int = 0
    bytes_read: int = 0
    skipped_bytes: int = 0
    truncations: int = 0
    replaced: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSED, 0))


@dataclass(eq=False)
class DirectoryTail:
    """Reads new complete lines from every file in ``directory`` whose name matches."""

    directory: str
    pattern: re.Pattern[str]
    _: KW_ONLY
    max_line_bytes: int
    max_read_bytes: int
    max_files: int
    # What each followed file was read to, by name.
    _files: dict[str, _File] = field(default_factory=dict, init=False, repr=False)

    @property
    def following(self) -> list[str]:
        """Names of the files followed after the last call."""
        return sorted(self._files)

    def _candidates(self, stats: TailStats) -> list[tuple[str, os.stat_result]]:
        found: list[tuple[str, os.stat_result]] = []
        try:
            entries = os.scandir(self.directory)
        except FileNotFoundError:
            return []
        with entries:
            for entry in entries:
                if not self.pattern.match(entry.name):
                    continue
                try:
                    if entry.is_symlink():
                        stats.refused["symlink"] += 1
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        stats.refused["not_regular"] += 1
                        continue
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue
        found.sort(key=lambda item: item[1].st_mtime, reverse=True)
        return found[: self.max_files]

    def read(self, on_line: Callable[[str, bytes], object]) -> TailStats:
        """Hand every new complete line to ``on_line(file name, line)``; statistics.

        Raises OSError when the directory itself cannot be listed (other than missing).
        """
        stats = TailStats()
        candidates = self._candidates(stats)
        names = {name for name, _ in candidates}
        for gone in set(self._files) - names:
            del self._files[gone]
        stats.files = len(candidates)
        for name, _ in candidates:
            try:
                self._read_file(name, on_line, stats)
            except _Refused as refused:
                # Swapped for a link or a FIFO after the listing: not followed.
                stats.refused[refused.reason] += 1
                stats.files -= 1
                self._files.pop(name, None)
            except OSError:
                # Removed between listing and reading, or unreadable: try again next time.
                self._files.pop(name, None)
        return stats

    def _open(self, name: str) -> int:
        """A descriptor on ``name`` if it is a regular file; never blocks, never follows."""
        try:
            fd = os.open(os.path.join(self.directory, name), _OPEN_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Refused("symlink") from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _Refused("not_regular")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _read_file(
        self,
        name: str,
        on_line: Callable[[str, bytes], object],
        stats: TailStats,
    ) -> None:
        # The descriptor's own stat, not the listing's: the name may have changed since.
        with os.fdopen(self._open(name), "rb") as fh:
            self._read_open(name, fh, os.fstat(fh.fileno()), on_line, stats)

    def _read_open(
        self,
        name: str,
        fh: BinaryIO,
        st: os.stat_result,
        on_line: Callable[[str, bytes], object],
        stats: TailStats,
    ) -> None:
        identity = (st.st_dev, st.st_ino)
        state = self._files.get(name)
        if state is None or state.identity != identity:
            if state is not None:
                stats.replaced += 1
            state = self._files[name] = _File(identity)
        size = st.st_size
        if size < state.offset:
            stats.truncations += 1
            state = self._files[name] = _File(identity)
        if (
            state.offset >= size
            and len(state.head) >= FINGERPRINT
            and st.st_mtime_ns == state.mtime_ns
        ):
            return  # untouched since the last call
        state.mtime_ns = st.st_mtime_ns
        if state.head and fh.read(len(state.head)) != state.head:
            stats.truncations += 1
            state = self._files[name] = _File(identity, mtime_ns=st.st_mtime_ns)
        if len(state.head) < FINGERPRINT:
            fh.seek(0)
            state.head = fh.read(min(size, FINGERPRINT))
        pending = size - state.offset
        if pending > self.max_read_bytes:
            skip = pending - self.max_read_bytes
            stats.skipped_bytes += skip + len(state.partial)
            state.offset += skip
            state.partial.clear()
            # Landing mid-line: the first (partial) line is not ours to parse.
            state.discarding = True
        if state.offset >= size:
            return
        fh.seek(state.offset)
        remaining = size - state.offset
        while remaining > 0:
            block = fh.read(min(BLOCK, remaining))
            if not block:
                break
            remaining -= len(block)
            state.offset += len(block)
            stats.bytes_read += len(block)
            self._split(name, state, block, on_line, stats)

    def _split(
        self,
        name: str,
        state: _File,
        block: bytes,
        on_line: Callable[[str, bytes], object],
        stats: TailStats,
    ) -> None:
        start = 0
        while True:
            end = block.find(b"\n", start)
            if end < 0:
                break
            if state.discarding:
                stats.skipped_bytes += len(state.partial) + end - start + 1
                state.partial.clear()
                state.discarding = False
            elif state.partial:
                state.partial += block[start:end]
                line = bytes(state.partial)
                state.partial.clear()
                self._emit(name, line, on_line, stats)
            else:
                self._emit(name, block[start:end], on_line, stats)
            start = end + 1
        rest = block[start:]
        if state.discarding:
            stats.skipped_bytes += len(rest)
        elif len(state.partial) + len(rest) > self.max_line_bytes:
            stats.skipped_bytes += len(state.partial) + len(rest)
            state.partial.clear()
            state.discarding = True
        else:
            state.partial += rest

    def _emit(
        self, name: str, line: bytes, on_line: Callable[[str, bytes], object], stats: TailStats
    ) -> None:
        if len(line) > self.max_line_bytes:
            stats.skipped_bytes += len(line) + 1
            return
        if line.strip():
            stats.lines += 1
            on_line(name, line)
