"""A Kubernetes API listing kept fresh in the background, for the workload source.

The API server is asked by a task of its own (never on a poll, never on a scrape),
through a :class:`BlockingCall` and the listing's :class:`~exporter.kube.KubeClient`
(whose timeout is the deadline of the whole request), every ``interval``, or sooner when
:meth:`ApiListing.poke` asks for it (no sooner than ``min_interval`` after the last
listing). The answer is cached and kept for three intervals when the server stops
answering. Failures are counted by reason in the source's error counter and shown
in ``/status``; they never fail a poll. The client's reasons are exported as the
source's own (:func:`attribution_reason`: ``timeout`` is ``api_timeout``, HTTP 403
``api_forbidden``, ...), as ``accel_workload_attribution_errors_total`` has always
counted them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from exporter import log
from exporter.errors import SourceError
from exporter.kube import KubeClient, KubeError
from exporter.sources.base import BlockingCall

T = TypeVar("T")
# How many intervals a last good answer outlives failures.
KEEP_INTERVALS = 3
# Time the listing thread gets beyond its client's deadline before it counts as hung.
DEADLINE_MARGIN_SECONDS = 1.0
# The client's reasons as the workload source has always exported them; any other
# http_<code> is api_http_error.
_REASONS = {
    "not_configured": "api_not_configured",
    "token_unreadable": "api_token_unreadable",
    "tls_error": "api_tls_error",
    "timeout": "api_timeout",
    "unreachable": "api_connect_failed",
    "bad_reply": "api_bad_reply",
    "reply_too_large": "api_reply_too_large",
    "http_401": "api_unauthorized",
    "http_403": "api_forbidden",
    "dra_not_served": "dra_not_served",
}


def attribution_reason(exc: KubeError) -> str:
    """The ``accel_workload_attribution_errors_total`` reason of a client failure."""
    if exc.reason in _REASONS:
        return _REASONS[exc.reason]
    return "api_http_error" if exc.reason.startswith("http_") else "api_error"


class ApiListing(Generic[T]):
    """Calls ``fetch(client)`` on its own interval and caches the answer.

    ``client`` (the API server, the node, the credentials, the deadline of one
    request) is the listing's own; ``quiet`` reasons (e.g. "not in a cluster" for an
    auto-enabled listing) set the state without being counted.
    """

    def __init__(
        self,
        name: str,
        what: str,
        client: KubeClient,
        fetch: Callable[[KubeClient], T],
        errors: Counter[str],
        *,
        interval: float,
        min_interval: float = 0.0,
        quiet: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.interval = interval
        self.min_interval = min_interval
        self.client = client
        self._fetch = fetch
        self._errors = errors
        self._quiet = quiet
        self._clock = clock
        self._log = log.get(source=name, listing=what)
        self._call = BlockingCall(f"{name}-{what}")
        self._task: asyncio.Task[None] | None = None
        self._attempted = asyncio.Event()
        self._poked = asyncio.Event()
        self.value: T | None = None
        self.listed_at: float | None = None
        self._tried_at: float | None = None
        self.state = "pending"

    async def start(self) -> None:
        """Start the background listing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.what)

    async def close(self) -> None:
        """Stop the background listing (a listing thread still running is abandoned)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_first(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the first listing succeeded or failed."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), timeout)

    def poke(self) -> None:
        """Ask for a listing before the interval is over (the cache lacks something)."""
        self._poked.set()

    async def _run(self) -> None:
        while True:
            await self.refresh()
            self._attempted.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self.interval)
            self._poked.clear()
            # A poke right after a listing waits for min_interval: a device the slices
            # never name must not turn the listing into a loop.
            since = self._clock() - (self._tried_at or 0.0)
            if since < self.min_interval:
                await asyncio.sleep(self.min_interval - since)

    async def refresh(self) -> None:
        """List once; on failure count the reason and keep the last answer for a while."""
        self._tried_at = self._clock()
        try:
            # The client keeps its own deadline; this one only catches a bug that hangs.
            found = await asyncio.wait_for(
                self._call(self._fetch, self.client),
                self.client.timeout + DEADLINE_MARGIN_SECONDS,
            )
        except asyncio.TimeoutError:
            self._failed("api_timeout", f"listing {self.what} took longer than its deadline")
        except SourceError as exc:  # the previous listing thread is still hung
            self._failed("api_timeout", exc.detail)
        except KubeError as exc:
            self._failed(attribution_reason(exc), exc.detail)
        except Exception as exc:  # a bug must not end the listing task
            self._failed("api_error", repr(exc))
        else:
            if self.state != "ok":
                self._log.info("listed", what=self.what)
            self.value = found
            self.listed_at = self._clock()
            self.state = "ok"

    def _failed(self, reason: str, detail: str) -> None:
        quiet = reason in self._quiet
        if not quiet:
            self._errors[reason] += 1
        state = f"{'inactive' if quiet else 'failing'}: {reason}: {detail}"
        if state != self.state:
            # Quiet reasons ("not in a cluster") are a node's normal state: no warning.
            emit = self._log.info if quiet else self._log.warning
            emit("cannot list", what=self.what, reason=reason, detail=detail)
        self.state = state
        keep = KEEP_INTERVALS * self.interval
        if self.listed_at is not None and self._clock() - self.listed_at > keep:
            self.value = None
            self.listed_at = None

    def age(self) -> float | None:
        """Seconds since the last good listing, for /status."""
        return None if self.listed_at is None else round(self._clock() - self.listed_at, 3)

    def status(self, prefix: str) -> dict[str, Any]:
        """State, cache age and requests sent (by method) under ``<prefix>``, ``<prefix>_*``."""
        return {
            prefix: self.state,
            f"{prefix}_age_seconds": self.age(),
            f"{prefix}_requests": self.client.stats(),
        }
