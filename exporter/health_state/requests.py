"""Clear requests: how ``accel-exporter health clear`` asks the daemon that holds a file.

While a daemon holds a memory file's lock, nobody else may write the file. The
command drops a request instead, ``<state_dir>/health-clear/<source>.<token>.request``
(written atomically), and waits for ``<source>.<token>.result``. The daemon looks at
each poll of that source: it claims a request by renaming it to ``.taken`` (so a
command that gives up and removes its request knows whether it was too late),
clears the device, writes its memory, then the result, and removes ``.taken``.

Who asked is the owner of the request file (its uid, as the kernel recorded it),
not anything the request says. Results nobody collected are removed after
:data:`STALE_AFTER_S`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import time
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.health_state.memory import CLEAR_DIR
from exporter.state_file import write_atomic

FORMAT = 1
REQUEST, TAKEN, RESULT = ".request", ".taken", ".result"
# A request or result file larger than this is not one of ours.
MAX_BYTES = 64 * 1024
# A result nobody came for (the command gave up or died) is removed after this long.
STALE_AFTER_S = 600.0

# Result statuses.
CLEARED, UNKNOWN_DEVICE, BAD_REQUEST = "cleared", "unknown_device", "bad_request"


@dataclass(frozen=True)
class ClearRequest:
    """One request a daemon took: the device as the operator named it, and who asked."""

    token: str
    device: str
    uid: int
    by: str


@dataclass(frozen=True)
class ClearResult:
    """What the daemon did with a request (written back for the command to print)."""

    status: str
    device: str = ""
    uuid: str = ""
    cleared: list[str] = field(default_factory=list)
    by: str = ""
    pid: int = 0
    # The daemon's health_state line after the clear: whether it survives a restart.
    persisted: str = ""
    detail: str = ""

    def to_json(self) -> str:
        """The result file's text."""
        return json.dumps({"format": FORMAT, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClearResult:
        """A result file's content; ValueError when it is not one."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.pop("format", None) != FORMAT:
            raise ValueError("not a clear result")
        try:
            found = cls(**raw)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(found.status, str) or not isinstance(found.cleared, list):
            raise ValueError("not a clear result")
        return found


def directory(state_dir: Path) -> Path:
    """Where requests and results wait."""
    return state_dir / CLEAR_DIR


def _name(source: str, token: str, suffix: str) -> str:
    return f"{source}.{token}{suffix}"


def who(uid: int) -> str:
    """``uid N (name)``: the user behind a uid, for the log and the result."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def ask(state_dir: Path, source: str, device: str) -> str:
    """Drop a request to clear ``device`` for ``source``'s daemon; its token. OSError as raised."""
    token = uuid_module.uuid4().hex
    text = json.dumps({"format": FORMAT, "device": device, "asked_at": time.time()})
    write_atomic(directory(state_dir) / _name(source, token, REQUEST), text)
    return token


def withdraw(state_dir: Path, source: str, token: str) -> bool:
    """Remove a request not taken yet; False when the daemon has taken it already."""
    try:
        os.unlink(directory(state_dir) / _name(source, token, REQUEST))
    except FileNotFoundError:
        return False
    return True


def _read_small(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{path} is larger than {MAX_BYTES} bytes")
    return data.decode("utf-8")


def result(
    state_dir: Path,
    source: str,
    token: str,
    timeout: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ClearResult | None:
    """Wait up to ``timeout`` seconds for the daemon's result (then removed); None if none."""
    path = directory(state_dir) / _name(source, token, RESULT)
    deadline = clock() + timeout
    while True:
        try:
            text = _read_small(path)
        except FileNotFoundError:
            if clock() >= deadline:
                return None
            sleep(0.1)
            continue
        with contextlib.suppress(OSError):
            path.unlink()
        return ClearResult.from_json(text)


def take(state_dir: Path, source: str, now: float | None = None) -> list[ClearRequest]:
    """The daemon's side: claim every request for ``source`` (renamed to ``.taken``).

    A request that cannot be parsed is answered ``bad_request`` at once. Results older
    than :data:`STALE_AFTER_S` are removed on the way. OSError of the directory as raised
    (none: no directory, nothing asked).
    """
    where = directory(state_dir)
    try:
        entries = list(os.scandir(where))
    except FileNotFoundError:
        return []
    now = time.time() if now is None else now
    out = []
    prefix = source + "."
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        if entry.name.endswith(RESULT):
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER_S:
                    os.unlink(entry.path)
            continue
        if not entry.name.endswith(REQUEST):
            continue
        token = entry.name[len(prefix) : -len(REQUEST)]
        taken = where / _name(source, token, TAKEN)
        try:
            os.rename(entry.path, taken)
            uid = os.stat(taken, follow_symlinks=False).st_uid
            raw: Any = json.loads(_read_small(taken))
        except FileNotFoundError:
            continue  # withdrawn meanwhile
        except (OSError, ValueError) as exc:
            answer(state_dir, source, token, ClearResult(BAD_REQUEST, detail=str(exc)))
            continue
        device = raw.get("device") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT or not isinstance(device, str):
            answer(state_dir, source, token, ClearResult(BAD_REQUEST, detail="not a clear request"))
            continue
        out.append(ClearRequest(token, device, uid, who(uid)))
    return out


def answer(state_dir: Path, source: str, token: str, done: ClearResult) -> None:
    """Write the result of a taken request, then forget the request. OSError as raised."""
    where = directory(state_dir)
    write_atomic(where / _name(source, token, RESULT), done.to_json())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(where / _name(source, token, TAKEN))
