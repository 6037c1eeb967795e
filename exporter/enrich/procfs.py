"""Per-process facts from a /proc tree (the root is configurable, for containers and tests).

Blocking file reads; callers run them off the event loop. Every failure is an
:class:`AttributionError` with a reason: ``pid_exited`` (the process ended
between being listed and being read, a normal race), ``permission_denied``
(another user's process without CAP_SYS_PTRACE), ``bad_cgroup`` (a line that
does not parse), ``read_error`` (anything else the kernel said).
"""

from __future__ import annotations

import errno
import os
import pwd
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from exporter.enrich.cgroup import CgroupIdentity, CgroupParseError, parse_cgroup
from exporter.enrich.errors import AttributionError

# Environment variables worth reading: Slurm's job identity, and the pod's hostname.
ENVIRON_KEYS = frozenset(
    {
        "SLURM_JOB_ID",
        "SLURM_JOB_USER",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_NAME",
        "HOSTNAME",
    }
)
# /proc/<pid>/environ is bounded by the kernel's argument limits; read no more than this.
ENVIRON_MAX_BYTES = 1 << 20
MAPS_CHUNK_BYTES = 1 << 16


def parse_environ(data: bytes, keys: frozenset[str] = ENVIRON_KEYS) -> dict[str, str]:
    """The wanted ``KEY=value`` entries of a NUL-separated environment block."""
    out: dict[str, str] = {}
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if not sep:
            continue
        name = key.decode("utf-8", "replace")
        if name in keys:
            out[name] = value.decode("utf-8", "replace")
    return out


@dataclass(frozen=True)
class ProcessFacts:
    """What /proc says about one process.

    ``env_error`` is the reason the environment could not be read (it is only a
    fallback, so the cgroup facts stay usable); empty when it was read.
    """

    pid: int
    cgroup: CgroupIdentity
    uid: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    env_error: str = ""


class ProcReader:
    """Reads per-process files under ``root`` (normally /proc)."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def path(self, pid: int, name: str) -> str:
        """``<root>/<pid>/<name>``."""
        return os.path.join(self.root, str(pid), name)

    def _fail(self, pid: int, what: str, exc: OSError) -> AttributionError:
        if isinstance(exc, (FileNotFoundError, ProcessLookupError)) or exc.errno == errno.ESRCH:
            return AttributionError("pid_exited", f"pid {pid} exited before its {what} was read")
        if isinstance(exc, PermissionError):
            return AttributionError("permission_denied", f"cannot read {what} of pid {pid}")
        return AttributionError("read_error", f"{what} of pid {pid}: {exc.strerror or exc}")

    def read(self, pid: int, name: str, limit: int = ENVIRON_MAX_BYTES) -> bytes:
        """Up to ``limit`` bytes of one file; AttributionError with the reason on failure."""
        try:
            with open(self.path(pid, name), "rb") as fh:
                data = fh.read(limit)
        except OSError as exc:
            raise self._fail(pid, name, exc) from None
        if not data and not os.path.exists(os.path.join(self.root, str(pid))):
            raise AttributionError("pid_exited", f"pid {pid} exited while its {name} was read")
        return data

    def cgroup(self, pid: int) -> CgroupIdentity:
        """The parsed cgroup file of ``pid``."""
        text = self.read(pid, "cgroup").decode("utf-8", "replace")
        try:
            return parse_cgroup(text)
        except CgroupParseError as exc:
            raise AttributionError("bad_cgroup", f"pid {pid}: {exc}") from None

    def status_field(self, pid: int, key: str) -> str:
        """One ``Key:`` field of /proc/<pid>/status (first column), or AttributionError."""
        text = self.read(pid, "status").decode("utf-8", "replace")
        for line in text.splitlines():
            name, sep, rest = line.partition(":")
            if sep and name == key:
                parts = rest.split()
                if parts:
                    return parts[0]
        raise AttributionError("read_error", f"pid {pid} status has no {key} field")

    def uid(self, pid: int) -> int | None:
        """The real uid of ``pid``, None when unreadable."""
        try:
            return int(self.status_field(pid, "Uid"))
        except (AttributionError, ValueError):
            return None

    def is_process(self, pid: int) -> bool:
        """True when ``pid`` is a live thread-group leader (a process, not a thread)."""
        try:
            return self.status_field(pid, "Tgid") == str(pid)
        except AttributionError:
            return False

    def facts(self, pid: int, environ: Callable[[CgroupIdentity], bool]) -> ProcessFacts:
        """Cgroup identity (required), uid, and the environment when wanted and readable.

        ``environ`` decides from the cgroup identity whether the environment is
        worth reading (it needs more privilege than the cgroup file).
        """
        identity = self.cgroup(pid)
        env: dict[str, str] = {}
        env_error = ""
        if environ(identity):
            try:
                env = parse_environ(self.read(pid, "environ"))
            except AttributionError as exc:
                env_error = exc.reason
        return ProcessFacts(pid, identity, self.uid(pid), env, env_error)

    def start_time(self, pid: int) -> str | None:
        """Field 22 of /proc/<pid>/stat (start time in clock ticks), None when unreadable.

        With the pid it names one process for the life of the system: a reused pid
        has a later start time.
        """
        try:
            text = self.read(pid, "stat", 4096).decode("ascii", "replace")
        except AttributionError:
            return None
        # The command name (field 2) is in parentheses and may hold spaces or ')'.
        fields = text[text.rfind(")") + 1 :].split()
        return fields[19] if len(fields) > 19 else None

    def pids(self) -> Iterator[int]:
        """Every numeric entry of the proc root."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            if name.isdigit():
                yield int(name)

    def maps_mention(self, pid: int, needle: bytes) -> bool:
        """True when a line of /proc/<pid>/maps contains ``needle`` (read in chunks)."""
        try:
            with open(self.path(pid, "maps"), "rb") as fh:
                tail = b""
                while True:
                    chunk = fh.read(MAPS_CHUNK_BYTES)
                    if not chunk:
                        return False
                    if needle in tail + chunk:
                        return True
                    tail = chunk[-len(needle) :]
        except OSError:
            return False


def user_name(uid: int | str | None) -> str:
    """The account name of ``uid``, or the number itself when it has no passwd entry."""
    if uid is None or uid == "":
        return ""
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (KeyError, ValueError, OverflowError):
        return str(uid)
