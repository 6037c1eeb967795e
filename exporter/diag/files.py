"""Reading a watched directory of result files without trusting what was dropped in it.

Only ``*.json`` names are looked at; a hidden name (``.x.json``) or one ending in
``.tmp`` is a writer's temporary file (write it so, then rename). Each file is
opened with ``O_NOFOLLOW | O_NONBLOCK``: a symlink is refused (``symlink``) rather
than followed out of the directory, a FIFO is opened without waiting for a writer
and then refused with the rest that are no regular file (``fstat``:
``not_regular_file``), a file over the size limit is refused before a byte is read
(``too_large``), and one that grows past it while read is refused too. Nothing here
raises for a file: each refusal is a :class:`~exporter.diag.model.DiagError`.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from exporter.diag.model import NOT_REGULAR, SYMLINK, TOO_LARGE, UNREADABLE, DiagError

SUFFIX = ".json"
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class Entry:
    """One candidate file: its name, what identifies this version of it, and its time.

    ``signature`` is (device, inode, size, mtime in ns) from ``lstat``: a rewrite or a
    replacement changes it, so a file is parsed and counted once per version.
    """

    name: str
    signature: tuple[int, int, int, int]
    mtime: float


def wanted(name: str) -> bool:
    """Whether a directory entry's name is a result file's (not hidden, not temporary)."""
    return name.endswith(SUFFIX) and not name.startswith(".") and ".tmp" not in name


def listing(path: str) -> list[Entry] | None:
    """The result files of ``path``, newest first; None when the directory does not exist.

    An entry that vanishes between the listing and its ``lstat`` is left out. A
    directory that exists but cannot be read raises OSError (the source's problem).
    """
    out: list[Entry] = []
    try:
        scan = os.scandir(path)
    except FileNotFoundError:
        return None
    with scan:
        for entry in scan:
            if not wanted(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            out.append(Entry(entry.name, sig, st.st_mtime))
    out.sort(key=lambda e: (-e.mtime, e.name))
    return out


def read(path: str, name: str, max_bytes: int) -> bytes:
    """The bytes of one result file, or DiagError with why it is refused."""
    full = os.path.join(path, name)
    try:
        fd = os.open(full, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DiagError(SYMLINK, "a symbolic link is not followed") from None
        raise DiagError(UNREADABLE, exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DiagError(NOT_REGULAR, f"not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size > max_bytes:
            raise DiagError(TOO_LARGE, f"{st.st_size} bytes, more than {max_bytes}")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise DiagError(TOO_LARGE, f"grew past {max_bytes} bytes while read")
        return b"".join(chunks)
    except OSError as exc:
        raise DiagError(UNREADABLE, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
