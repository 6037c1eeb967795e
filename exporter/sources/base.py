"""What a source is: something the scheduler polls on its own timer.

A source turns one poll into readings, or raises :class:`~exporter.errors.SourceError`
with a reason. It never touches the store or an output; the scheduler does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from exporter.config.source import SourceConfig
from exporter.errors import SourceError
from exporter.model import Reading
from exporter.verdict import DeviceHealth

if TYPE_CHECKING:
    from exporter.health_api import DeviceReport
    from exporter.store import View

T = TypeVar("T")


class StoreReader(Protocol):
    """Read access to the latest data of every source (what an enricher may see)."""

    def view(self) -> View:
        """The fresh readings of all sources."""
        ...


class Source:
    """Base class of every source; subclasses implement :meth:`poll`.

    ``config`` must be resolved (timeout and stale_after filled in).
    ``auto`` is True when the source was enabled with ``enabled: auto``, so that
    an unavailable library is a normal state rather than a failure.
    """

    name: str = "source"

    def __init__(self, name: str, config: SourceConfig) -> None:
        self.name = name
        self.config = config
        self.auto = config.enabled == "auto"

    @property
    def timeout(self) -> float:
        """Deadline of one poll, seconds."""
        return self.config.poll_timeout

    @property
    def stale_after(self) -> float:
        """Age after which this source's data is no longer exported."""
        return self.config.stale_seconds

    def interval(self) -> float:
        """Seconds between polls; a source may change it (e.g. a RAS follower)."""
        return self.config.interval

    @property
    def restarts(self) -> int:
        """Worker restarts so far (sources without a worker: 0)."""
        return 0

    def attach(self, store: StoreReader) -> None:
        """Receive read access to other sources' data before :meth:`start`.

        Enrichers (workload attribution, checkpoint state) build on what the
        device sources last reported; every other source ignores this.
        """

    def fingerprint(self) -> tuple[Any, ...]:
        """What this source was built from: a reload that builds an equal one keeps this one.

        Each factory reads its own config section (sources/registry.py), so the
        class, the name and that section say it all; a source built from more
        adds it.
        """
        return (type(self), self.name, self.config)

    def adopt(self, old: Source) -> None:
        """Take over what ``old`` learnt that a reload must not forget. Default: nothing.

        ``old`` is the stopped source of the same name this one replaces.
        """

    def carried(self) -> Sequence[Reading]:
        """What :meth:`adopt` kept to show until the first poll answers. Default: nothing.

        Shown as soon as the source starts, so a burst of reloads that never lets
        a poll finish still refreshes it (nothing goes stale, no series vanishes).
        """
        return ()

    async def start(self) -> None:
        """Start background work (long-lived streams, event readers). Default: nothing."""

    async def wait_ready(self, timeout: float) -> None:
        """Wait until the source could answer a poll (e.g. its worker bootstrapped)."""

    async def poll(self) -> Sequence[Reading]:
        """Read the source once. Raise SourceError (or a subclass) on failure."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release everything: tasks, sockets, worker processes."""

    def removed(self) -> None:
        """A reload dropped this source for good (after :meth:`close`). Default: nothing.

        Undo here what outlives the source and must not outlive its removal (what it
        posted for others to read); a reload that replaces it calls :meth:`adopt` instead.
        """

    def status(self) -> dict[str, Any]:
        """Extra fields for /status (worker pid, role, ...)."""
        return {}

    def verdicts(self) -> tuple[DeviceHealth, ...]:
        """The health verdicts the last poll made (device sources). Default: none.

        Read by the scheduler right after a poll ended, with or without a result, and
        put on its snapshot (exporter.verdict).
        """
        return ()


@runtime_checkable
class DeviceLister(Protocol):
    """A source whose devices ``/v1/devices`` lists, each with its verdict record.

    The device sources (exporter.sources.device) and the Neuron source, which runs no
    worker but the same health judge.
    """

    def health_report(self, verdicts: Mapping[str, DeviceHealth]) -> list[DeviceReport]:
        """Each device the source lists with its verdict in ``verdicts`` (by uuid)."""
        ...


class BlockingCall:
    """Runs a blocking function on its own daemon thread, one call at a time.

    ``asyncio.to_thread`` would queue a second call behind a hung one and its
    executor threads are joined at interpreter exit, so a hung /proc read could
    block shutdown. Here a call that is still running makes the next one fail
    fast with reason ``timeout``, and a hung thread never delays exit.

    The thread is started at a call and serves the later ones while they come at
    least every :data:`THREAD_IDLE_SECONDS` (a thread started per call cost a tenth
    of an idle daemon's CPU: the host source polls every second); it ends after that
    long without a call, so a source polled once a minute, or replaced by a reload,
    keeps no thread.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # True from the start of a call until its thread has handed back a result,
        # even if the awaiting poll was cancelled by its deadline meanwhile.
        self._busy = False
        self._started = 0.0
        self._thread = _JobThread(f"poll-{name}")

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a thread and await its result."""
        if self._busy:
            # Same reason as the poll that hung: the cause has not changed.
            hung = time.monotonic() - self._started
            raise SourceError("timeout", f"the previous poll has been hung for {hung:.0f}s")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def deliver(ok: bool, value: Any) -> None:
            self._busy = False
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def run() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting coroutine
                outcome: tuple[bool, Any] = (False, exc)
            else:
                outcome = (True, result)
            # The loop may have closed while this call was hung; nobody is waiting then.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, *outcome)

        self._busy = True
        self._started = time.monotonic()
        try:
            self._thread.submit(run)
        except BaseException:
            self._busy = False
            raise
        return await future


# A BlockingCall's thread ends after this long without a call.
THREAD_IDLE_SECONDS = 10.0


class _JobThread:
    """One daemon thread running jobs in turn; started on demand, gone when idle."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ready = threading.Condition()
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._running = False

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the thread, started now if there is none."""
        with self._ready:
            self._jobs.append(job)
            if self._running:
                self._ready.notify()
                return
            self._running = True
        try:
            threading.Thread(target=self._serve, name=self.name, daemon=True).start()
        except BaseException:  # no thread (the process is at its limit): nothing queued
            with self._ready:
                self._running = False
                self._jobs.clear()
            raise

    def _serve(self) -> None:
        while True:
            with self._ready:
                # Decided under the lock that submit takes: a job handed in is run,
                # by this thread or by the one submit starts once this is gone.
                if not self._jobs and not self._ready.wait_for(
                    lambda: bool(self._jobs), THREAD_IDLE_SECONDS
                ):
                    self._running = False
                    return
                job = self._jobs.popleft()
            job()
            del job  # not kept while waiting: it refers to the call's source
