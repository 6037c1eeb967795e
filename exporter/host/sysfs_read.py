"""One attribute read of the fabric readers, with the reason it failed.

sysfs is a moving target: a NIC unbound or a device hot-unplugged takes its
files away between the listing of a directory and the read of a file in it, a
driver may refuse a read (``EINVAL``, ``EIO`` from firmware) or answer text no
parser knows. The fabric readers (:mod:`exporter.host.infiniband`,
:mod:`exporter.host.pcie`) say which, per file, as a :class:`ReadProblem`, so the
source counts it by reason and goes on with every other file. Pure reading: a
sysfs counter that clears on write is never opened for writing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from exporter.catalog.vocabulary import FABRIC_READ_REASONS

# The reasons of accel_fabric_read_errors_total: a file listed and gone when read, one
# that could not be read, one whose text is not what the kernel writes there.
READ_REASONS = FABRIC_READ_REASONS
VANISHED, UNREADABLE, MALFORMED = READ_REASONS
# sysfs attributes are one page at most; the fabric's are a line.
LIMIT = 4096


class ParseError(ValueError):
    """A sysfs attribute whose text is not in the kernel's format."""


@dataclass(frozen=True)
class ReadProblem:
    """One file that could not be used: its path, why (:data:`READ_REASONS`), the error."""

    path: str
    reason: str
    detail: str


class Unread(Exception):
    """A read that failed, carrying its :class:`ReadProblem`."""

    def __init__(self, problem: ReadProblem) -> None:
        super().__init__(f"{problem.path}: {problem.reason}: {problem.detail}")
        self.problem = problem


def read_text(path: str) -> str:
    """The stripped text of one sysfs attribute; :class:`Unread` with the reason if not.

    ``os.open``/``os.read`` rather than ``open()``: no buffered file object per
    read (the fabric poll reads a few hundred small files).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise Unread(ReadProblem(path, VANISHED, exc.strerror or str(exc))) from None
    except OSError as exc:
        raise Unread(ReadProblem(path, UNREADABLE, exc.strerror or str(exc))) from None
    try:
        raw = os.read(fd, LIMIT)
    except FileNotFoundError as exc:  # ENOENT from a device removed while open
        raise Unread(ReadProblem(path, VANISHED, exc.strerror or str(exc))) from None
    except OSError as exc:
        raise Unread(ReadProblem(path, UNREADABLE, exc.strerror or str(exc))) from None
    finally:
        os.close(fd)
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise Unread(ReadProblem(path, MALFORMED, f"not ASCII: {exc}")) from None


def malformed(path: str, exc: Exception) -> Unread:
    """The :class:`Unread` of a file whose text a parser refused."""
    return Unread(ReadProblem(path, MALFORMED, str(exc)))


def listdir(path: str) -> list[str] | None:
    """The sorted entries of a directory; None when it is not there (or not readable)."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def resolve(path: str) -> str:
    """Where a sysfs symlink points, fully resolved; "" when it is gone or dangling."""
    try:
        return os.path.realpath(path, strict=True)
    except (OSError, RuntimeError):
        return ""
