"""One device source's health judge and its memory in ``health.state_dir``.

The judge (:class:`exporter.health.HealthJudge`) remembers what its rules compare
with the past: XIDs and AFIDs, ECC baselines and growth, links seen up, devices
lost to a reset-only reason, NVML's last recovery action, operators' clears. The
keeper makes that memory survive a daemon restart:

- **recall** at the source's first poll, before its first verdict: the lock is
  taken first (so nobody writes the file between this read and our first write),
  the file read (``health-<source>.json``, :mod:`exporter.health_state.memory`), a
  file of another boot's id cleared of what a reboot resolves;
- **keep** after every poll: the memory written when it changed (at most once a
  poll, in a thread: the poll runs in the event loop), atomic and fsynced
  (:mod:`exporter.state_file`);
- **clear requests** of ``accel-exporter health clear`` taken at each poll
  (:mod:`exporter.health_state.requests`): only the lock holder takes them.

A reload hands the keeper (judge, file and lock) to the source it builds
(:meth:`HealthKeeper.take_over`), so one process never has two writers of a file,
and the lock goes when the last source using it is closed for good. Problems
(garbage, read-only, full, locked by another daemon) never stop the source: they
are counted (``accel_exporter_state_errors_total``) and said in /status
(``health_state``), and the memory goes on in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from exporter import log, state_file
from exporter.config.health import HealthConfig
from exporter.health import HealthJudge, Identity
from exporter.health_state import memory, requests
from exporter.health_state.requests import ClearRequest, ClearResult
from exporter.state_book import StateBook
from exporter.state_file import ReadResult, StateFile, StateFileError

# At the first read, a lock held by another process is asked again this often, this
# many times: ``health clear`` without a daemon holds it for a moment.
LOCK_TRIES = 10
LOCK_RETRY_S = 0.1
# An unchanged memory whose write failed is tried again this often.
RETRY_S = 60.0


class HealthKeeper(StateBook):
    """The health judge of one device source, and its memory file (see the module)."""

    UNUSABLE = "health memory file ignored: the judge starts with no memory"

    def __init__(
        self,
        source: str,
        config: HealthConfig,
        *,
        boot: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(log.get(source=source))
        self.source = source
        self.judge = HealthJudge.configured(config, source)
        self.boot = state_file.boot_id() if boot is None else boot
        self.state_dir = config.state_dir
        self._sleep = sleep
        if config.state_dir:
            self.path = Path(config.state_dir) / memory.file_name(source)
        self._recalled = False
        # The text whose write failed last, and when to try it again.
        self._failed = ""
        self._retry_at = 0.0
        # Clear requests done this poll, answered once the memory is written.
        self._done: list[tuple[str, ClearResult]] = []

    # -- a reload ----------------------------------------------------------------------

    def take_over(self, old: HealthKeeper, config: HealthConfig) -> HealthKeeper:
        """The keeper the new source of a reload goes on with (this one is its own).

        The old judge's memory goes on, with the reloaded config's window and actions.
        Same file: the old keeper itself (its lock claimed again before this one lets
        go, so the lock never lapses). Another file (``state_dir`` changed): this
        keeper, with the old judge, written to the new file at the next poll.
        """
        old.judge.reconfigure(config)
        if old.path == self.path:
            if old._file is not None:
                old._file.claim(old)
            self.close()
            return old
        self.judge = old.judge
        self._recalled = old._recalled or bool(old.judge.known())
        old.close()
        return self

    def close(self) -> None:
        """Write no more: the source is closed for good (the lock goes with the last claim)."""
        if self._file is not None:
            self._file.release(self)

    # -- around a poll -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def around_poll(self) -> AsyncIterator[None]:
        """A poll between :meth:`before_poll` and :meth:`after_poll`, whatever its outcome."""
        await self.before_poll()
        try:
            yield
        finally:
            await self.after_poll()

    async def before_poll(self) -> None:
        """Recall the file at the first poll; take this source's clear requests."""
        if not self._recalled:
            found = await asyncio.to_thread(self._read)
            self._recall(found)
            self._recalled = True
        if self._file is None or not self._file.locked_here:
            return
        state_dir = self._file.path.parent
        try:
            asked = await asyncio.to_thread(requests.take, state_dir, self.source)
        except OSError as exc:
            self._log.warning("health clear requests unreadable", detail=str(exc))
            return
        for request in asked:
            self._done.append((request.token, self._clear(request)))

    async def after_poll(self) -> None:
        """Write the memory if it changed (in a thread), then answer the clear requests."""
        if self._file is None or not state_file.writes_enabled():
            return
        text = memory.encode(memory.Memory(self.source, self.boot, self.judge.remembered()))
        done, self._done = self._done, []
        # A write that failed is tried again when the memory changes, else once a while
        # (a disk freed, another daemon gone): not at every poll.
        retry = text != self._failed or time.monotonic() >= self._retry_at
        if done or (text != self._written and retry):
            await asyncio.to_thread(self._save, text, done)

    # -- the file ----------------------------------------------------------------------

    def _read(self) -> ReadResult:
        """Take the lock (the daemon), then read the file. Runs in a thread."""
        if self._file is None:
            return ReadResult(None, "missing")
        if state_file.writes_enabled():
            self._lock(self._file)
        return self._file.read()

    def _lock(self, file: StateFile) -> None:
        """Become the writer, waiting a moment for a ``health clear`` that holds the lock."""
        for attempt in range(LOCK_TRIES):
            try:
                file.lock()
            except StateFileError as exc:
                self._problem = _why(exc)
                if exc.reason != "locked" or attempt == LOCK_TRIES - 1:
                    return
                self._sleep(LOCK_RETRY_S)
            else:
                self._problem = ""
                # The requests' directory is the writer's: a daemon running as its own
                # user must be able to rename what root's `health clear` leaves there.
                with contextlib.suppress(OSError):
                    requests.directory(file.path.parent).mkdir(exist_ok=True)
                return

    def _recall(self, found: ReadResult) -> None:
        """Give the judge what the file kept (in the event loop, before the first verdict)."""
        if self._file is None:
            return
        data = self._found(found)
        if data is None:
            return
        try:
            kept, problems = memory.decode(data)
            if kept.source != self.source:
                raise ValueError(f"the file is source {kept.source!r}'s")
        except ValueError as exc:
            self._unusable("corrupt", str(exc))
            return
        for problem in problems:
            self._log.warning(
                "health memory of a device ignored", path=str(self.path), detail=problem
            )
        rebooted = bool(kept.boot_id) and bool(self.boot) and kept.boot_id != self.boot
        self.judge.recall(kept.devices, rebooted=rebooted)
        self._log.info(
            "health memory read",
            path=str(self.path),
            devices=len(kept.devices),
            events=sum(len(m.events) for m in kept.devices.values()),
            rebooted=rebooted,
        )

    def _save(self, text: str, done: list[tuple[str, ClearResult]]) -> None:
        """Write the memory, then the results of the clears it holds. Runs in a thread."""
        assert self._file is not None
        if text != self._written:
            try:
                self._file.write(text)
            except StateFileError as exc:
                # The memory goes on in process; only a daemon restart would lose it.
                self._count(exc.reason)
                self._failed, self._retry_at = text, time.monotonic() + RETRY_S
                problem = _why(exc)
                if problem != self._problem:
                    self._log.warning(
                        "health memory not written",
                        path=str(self.path),
                        reason=exc.reason,
                        detail=exc.detail,
                    )
                self._problem = problem
            else:
                if self._problem:
                    self._log.info("health memory written again", path=str(self.path))
                self._problem = ""
                self._written, self._failed = text, ""
        for token, result in done:
            answered = dataclasses.replace(result, persisted=self.describe())
            try:
                requests.answer(self._file.path.parent, self.source, token, answered)
            except OSError as exc:
                self._log.warning("health clear result not written", token=token, detail=str(exc))

    # -- clears ------------------------------------------------------------------------

    def resolve(self, device: str) -> Identity | None:
        """The device a clear names: a uuid, or ``<source>:<device label>`` of this source."""
        known = self.judge.known()
        if device in known:
            return known[device]
        lowered = {uuid.lower(): ident for uuid, ident in known.items()}
        if device.lower() in lowered:
            return lowered[device.lower()]
        source, sep, label = device.partition(":")
        if sep and source == self.source:
            for ident in known.values():
                if ident[0] == label:
                    return ident
        return None

    def _clear(self, request: ClearRequest) -> ClearResult:
        ident = self.resolve(request.device)
        pid = os.getpid()
        if ident is None:
            self._log.warning(
                "health clear of an unknown device", device=request.device, by=request.by
            )
            return ClearResult(
                requests.UNKNOWN_DEVICE,
                device=request.device,
                by=request.by,
                pid=pid,
                detail=f"source {self.source} knows no device {request.device!r}",
            )
        cleared = self.judge.clear(ident, by=request.by)
        return ClearResult(
            requests.CLEARED,
            device=f"{self.source}:{ident[0]}",
            uuid=ident[1],
            cleared=cleared,
            by=request.by,
            pid=pid,
        )

    # -- /status -----------------------------------------------------------------------

    def describe(self) -> str:
        """One line for /status: whether the memory survives a daemon restart, if not why."""
        if self._file is None:
            return (
                "not persisted: no health.state_dir (a daemon restart forgets every XID, "
                "AFID and reset the judge remembers)"
            )
        if not self._recalled:
            return f"not read yet: {self.path} (read at the first poll)"
        if self._problem:
            return (
                f"not persisted: {self._problem} ({self.path}); the memory is kept in "
                "process, a daemon restart forgets what changed since"
            )
        if not state_file.writes_enabled():
            return f"read from {self.path} (only the daemon writes it)"
        if self.load_problem:
            return (
                f"persisted to {self.path}; the file found at start was ignored "
                f"({self.load_problem}), so the judge started with no memory"
            )
        return f"persisted to {self.path}"


def _why(exc: StateFileError) -> str:
    """A write problem as /status says it: ``locked by pid N``, else ``reason: detail``."""
    return exc.detail if exc.reason == "locked" else f"{exc.reason}: {exc.detail}"
