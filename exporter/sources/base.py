"""What a source is: something the scheduler polls on its own timer.

A source turns one poll into readings, or raises :class:`~exporter.errors.SourceError`
with a reason. It never touches the store or an output; the scheduler does.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import weakref
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

    The thread is started at the first call and serves every later one (a thread
    started per call cost a tenth of an idle daemon's CPU: the host source polls
    every second); it ends once this object is gone (its source replaced by a reload).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # True from the start of a call until its thread has handed back a result,
        # even if the awaiting poll was cancelled by its deadline meanwhile.
        self._busy = False
        self._started = 0.0
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] | None = None

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
        self._submit(run)
        return await future

    def _submit(self, job: Callable[[], None]) -> None:
        """Hand ``job`` to this object's thread, started now if it is not yet."""
        if self._jobs is None:
            jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=_serve_jobs, args=(jobs,), name=f"poll-{self.name}", daemon=True
            )
            thread.start()
            # The thread holds the queue, never this object, so this can be collected.
            weakref.finalize(self, jobs.put, None)
            self._jobs = jobs
        self._jobs.put(job)


def _serve_jobs(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    """A BlockingCall's thread: run each job in turn until the ``None`` its end sends."""
    while True:
        job = jobs.get()
        if job is None:
            return
        job()
        # Not kept while waiting for the next: it refers to the call's source, which
        # must be free to go (and, with it, end this thread).
        del job
