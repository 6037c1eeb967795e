"""A small JSON state file that survives daemon restarts: one writer, atomic, with reasons.

Used by the health judge's memory (``health-<source>.json``) and the AMD CPER
ledger (``amdsmi-cper.json``). Three promises:

- **Atomic and durable.** A write goes to a temporary file unique to this writer in
  the same directory, is flushed and fsynced, renamed over the file
  (``os.replace``), and the directory is fsynced: a crash or power loss leaves the
  old file or the new one, never a mix, and a renamed file is on disk.
- **One writer per file.** The writer holds an ``fcntl.flock`` on ``<file>.lock``
  beside it for as long as it writes (its pid inside, for others to name it). A
  second process that finds it taken reads the file but never writes it, and says
  so (``locked by pid N``). One :class:`StateFile` per path and process
  (:func:`shared`), so a config reload that builds a new source shares the lock
  instead of fighting its own process for it; the lock is let go when nothing in
  the process claims the file any more.
- **Reasons, not exceptions.** A read answers why it found nothing usable
  (``unreadable``, ``corrupt``); a failed write raises :class:`StateFileError`
  with a reason (``read_only``, ``no_space``, ``permission_denied``,
  ``write_failed``, ``locked``): the labels of ``accel_exporter_state_errors_total``.

Only the daemon writes (:func:`enable_writes`); one-shot commands read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
# Written files are readable by an operator's tools (as the ledger's always were).
FILE_MODE = 0o644

# Only the daemon writes state files; one-shot commands (once, probe, check --local,
# record) read them, so their verdicts and counts go on from the daemon's, and leave
# them alone. A dict, so that a module holding it (cper_ledger) shares the switch.
WRITES = {"enabled": False}


def enable_writes() -> None:
    """Let this process write state files (the daemon calls this once)."""
    WRITES["enabled"] = True


def writes_enabled() -> bool:
    """Whether this process writes state files (the daemon) or only reads them."""
    return WRITES["enabled"]


def boot_id(path: Path = BOOT_ID) -> str:
    """The kernel's id of this boot ("" when it cannot be read)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def write_reason(exc: OSError) -> str:
    """A short reason for a failed write of a state file (a label value)."""
    if exc.errno == errno.EROFS:
        return "read_only"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no_space"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission_denied"
    return "write_failed"


class StateFileError(Exception):
    """A state file that could not be written (or locked for writing), with its reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ReadResult:
    """What a read found: the document, or why there is none (``reason``).

    ``reason`` is "" with a document, ``missing`` when there is no file (a first
    start: no problem), ``unreadable`` (an OSError) or ``corrupt`` (not a JSON
    object).
    """

    data: dict[str, Any] | None
    reason: str = ""
    detail: str = ""


def read_json(path: Path) -> ReadResult:
    """The JSON object in ``path``, or why there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ReadResult(None, "missing", f"{path} does not exist")
    except OSError as exc:
        return ReadResult(None, "unreadable", str(exc))
    except ValueError as exc:  # not UTF-8
        return ReadResult(None, "corrupt", str(exc))
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return ReadResult(None, "corrupt", str(exc))
    if not isinstance(raw, dict):
        return ReadResult(None, "corrupt", "not a JSON object")
    return ReadResult(raw)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (the new name is in the directory's blocks)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _owned_like(fd: int, directory: Path) -> None:
    """Give a file root creates the owner of its directory (the daemon's user).

    ``health clear`` runs as root where the daemon runs as its own user: a memory or
    lock file it creates must stay usable by the daemon. Best effort, root only.
    """
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError):
        owner = os.stat(directory)
        if (owner.st_uid, owner.st_gid) != (0, 0):
            os.fchown(fd, owner.st_uid, owner.st_gid)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text``: temporary file, flush, fsync, rename, fsync the directory.

    The temporary file's name is unique to this call (``.<name>.<random>.tmp``), so two
    writers never write into each other's. OSError as raised; the temporary file is
    removed when the write fails before the rename.
    """
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), FILE_MODE)
            _owned_like(fh.fileno(), directory)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def lock_holder(lock_path: Path) -> str:
    """Who the lock file names ("pid N"), for a message; "another process" if it names none."""
    try:
        pid = lock_path.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def try_lock(lock_path: Path) -> int:
    """Take ``lock_path``'s flock without waiting; its descriptor, with this pid written in.

    StateFileError ``locked`` ("locked by pid N") when another open file holds it;
    StateFileError with the write reason when the lock file cannot be made.
    """
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except PermissionError:
            # Another user's lock file: flock needs no write access (no pid written then).
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
        _owned_like(fd, lock_path.parent)
    except OSError as exc:
        raise StateFileError(write_reason(exc), str(exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StateFileError("locked", f"locked by {lock_holder(lock_path)}") from None
        raise StateFileError(write_reason(exc), str(exc)) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # the lock holds without the pid; others then say "another process"
    return fd


def unlock(fd: int) -> None:
    """Let go of a lock :func:`try_lock` took (the lock file stays: removing it races)."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


class StateFile:
    """One state file of this process: read by anyone, written under its lock.

    Get it with :func:`shared`. Whoever writes it claims it first (:meth:`claim`); the lock
    is taken at the first write (or :meth:`lock`) and let go once every claim is
    released (or its claimant garbage-collected): the file's writer lives as long as
    something in the process means to write it, across config reloads.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + LOCK_SUFFIX)
        self._fd: int | None = None
        # Writes run in worker threads, releases in the event loop or wherever the
        # garbage collector finalizes a claimant (reentrant: that may be mid-write).
        self._mutex = threading.RLock()
        self._claims: dict[int, weakref.finalize[[int], object]] = {}

    @property
    def locked_here(self) -> bool:
        """Whether this process holds the file's lock (is its writer)."""
        return self._fd is not None

    def claim(self, owner: object) -> None:
        """``owner`` means to write this file: the lock is kept while it does."""
        key = id(owner)
        if key not in self._claims:
            self._claims[key] = weakref.finalize(owner, self._drop, key)

    def release(self, owner: object) -> None:
        """``owner`` writes no more; the lock goes with the last claim."""
        done = self._claims.get(id(owner))
        if done is not None:
            done()  # runs _drop once, whether now or when the owner is collected

    def _drop(self, key: int) -> None:
        with self._mutex:
            self._claims.pop(key, None)
            if not self._claims and self._fd is not None:
                unlock(self._fd)
                self._fd = None

    def lock(self) -> None:
        """Become the file's writer; StateFileError (``locked`` or a write reason) if not."""
        with self._mutex:
            self._lock()

    def _lock(self) -> None:
        if self._fd is not None:
            return
        self._fd = try_lock(self.lock_path)
        # Temporary files of a writer that died between write and rename: only the
        # lock holder may remove them (nobody else writes here).
        for stale in self.path.parent.glob(f".{self.path.name}.*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def read(self) -> ReadResult:
        """The file's JSON object, or why there is none (see :class:`ReadResult`)."""
        return read_json(self.path)

    def write(self, text: str) -> None:
        """Replace the file by ``text`` atomically, taking the lock first if not held.

        StateFileError with the reason when it cannot (``locked``: another process
        writes this file, and this one must not).
        """
        with self._mutex:
            self._lock()
            try:
                write_atomic(self.path, text)
            except OSError as exc:
                raise StateFileError(write_reason(exc), str(exc)) from None


# path -> the process's one object for it (see StateFile).
_SHARED: dict[str, StateFile] = {}
_SHARED_MUTEX = threading.Lock()


def shared(path: Path) -> StateFile:
    """The process's :class:`StateFile` for ``path``: one object, so one lock, per file."""
    key = os.path.abspath(path)
    with _SHARED_MUTEX:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = StateFile(Path(key))
        return found
