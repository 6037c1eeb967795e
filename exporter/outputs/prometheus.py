"""Prometheus exposition built from the catalog and the store, cached per store view.

Render is pure: it reads a :class:`~exporter.store.View` and nothing else. The
bytes for each (view, format, compression) are built once and then served to
every scrape until the store changes, so a scrape costs little more than a
socket write no matter how many clients ask at once.

Ahead of scrapes, a thread woken by the store's change signal renders each
format a scraper uses once per observed scrape interval, shortly before the next
scrape is due: data that changes every second but is read every 15 s costs one
render per 15 s, not fifteen.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporter import allocator, log
from exporter.catalog import CATALOG, MetricSpec
from exporter.family_names import ACCEL_EXPORTER_SERIES
from exporter.model import Reading
from exporter.outputs import text_format
from exporter.outputs.compat import Compat, Family
from exporter.outputs.compat import encode as encode_compat
from exporter.outputs.profile import Profile
from exporter.outputs.rows import rows
from exporter.outputs.stamp import StampFactory
from exporter.outputs.text_format import Negotiated, ProcessFamilies, negotiate_or_text
from exporter.store import SELF_SOURCE, Store, View

# Process metrics (RSS, CPU) change continuously; refreshing them this often
# keeps the exposition cacheable between store changes.
PROCESS_REFRESH_SECONDS = 5.0
# How long a format nobody asks for any more is still prepared.
PRERENDER_WANTED_SECONDS = 600.0
# A format is rendered this share of its scrape interval before the next scrape is
# due (within the bounds below), and that body is served to the scrape if it is not
# older than twice that lead (a late scrape gets a fresh render instead).
PRERENDER_LEAD_SHARE = 0.1
PRERENDER_LEAD_MIN_SECONDS = 0.05
PRERENDER_LEAD_MAX_SECONDS = 1.0
# Scrapers faster than this (tests, debugging) get the newest data on every scrape:
# their format is rendered on the first change after each scrape, and served only
# while the store has not changed since.
PRERENDER_MIN_INTERVAL_SECONDS = 1.0
SERIES = ACCEL_EXPORTER_SERIES


def _lead(interval: float) -> float:
    return min(
        PRERENDER_LEAD_MAX_SECONDS, max(PRERENDER_LEAD_MIN_SECONDS, interval * PRERENDER_LEAD_SHARE)
    )


@dataclass
class _Scrapes:
    """When one format was scraped, and what was rendered ahead for its next scrape."""

    negotiated: Negotiated
    last: float
    interval: float | None = None
    # ``last`` as it was when a body was prepared for the next scrape, and when.
    prepared_for: float | None = None
    prepared_at: float = 0.0
    body: bytes | None = None

    def due(self) -> float:
        """When to render ahead of the next scrape (at once while no interval is known)."""
        if self.interval is None or self.interval < PRERENDER_MIN_INTERVAL_SECONDS:
            return self.last
        return self.last + self.interval - _lead(self.interval)

    def take_prepared(self, now: float) -> bytes | None:
        """The body rendered ahead for this scrape, when there is one and it is recent."""
        if self.prepared_for != self.last or self.body is None:
            return None
        if self.interval is None or self.interval < PRERENDER_MIN_INTERVAL_SECONDS:
            return None  # the cache serves it while the store is unchanged
        max_age = 2 * _lead(self.interval or 0.0)
        return self.body if now - self.prepared_at <= max_age else None


class Exposition:
    """Serves exposition bytes, rebuilt only when the store view changes."""

    def __init__(
        self,
        store: Store,
        process_metrics: bool = True,
        clock: Callable[[], float] = time.monotonic,
        stamp: StampFactory | None = None,
        compat: Compat | None = None,
        profile: Profile | None = None,
    ) -> None:
        self.store = store
        self._clock = clock
        self.stamp = stamp
        # Other exporters' series (outputs.prometheus.compat), built from the same view.
        self.compat = compat
        # ``outputs.prometheus``'s families and thinning; without one, every reading as
        # stored (no derived totals, no accel_exporter_series).
        self.profile = profile
        self._process = ProcessFamilies() if process_metrics else None
        self._lock = threading.Lock()
        self._cache: dict[tuple[object, ...], bytes] = {}
        self._cache_key: tuple[object, ...] | None = None
        self._negotiated: dict[str, Negotiated] = {}
        # (content type, gzip) -> its scrapes: what to pre-render, and when. Written by
        # HTTP threads, read and pruned by the pre-render thread, reset by a reload:
        # the dict and its _Scrapes are touched only under _wanted_lock (never held
        # while rendering, and taken after _lock where both are).
        self._wanted: dict[tuple[str, bool], _Scrapes] = {}
        self._wanted_lock = threading.Lock()
        self._prerender: threading.Thread | None = None
        # The newest complete body per format, served while a newer one is rendered.
        self._last: dict[tuple[str, bool], bytes] = {}
        self._stop_prerender = threading.Event()

    def set_stamp(
        self,
        stamp: StampFactory | None,
        *,
        compat: Compat | None = None,
        profile: Profile | None = None,
    ) -> None:
        """Change the opt-in label stamping, the compat series and the profile (config reload).

        Drops every cached and pre-rendered body, so the next scrape carries the
        new families only (none left over from the old profile or compat list).
        """
        with self._lock:
            self.stamp = stamp
            self.compat = compat
            if profile is not None:
                self.profile = profile
            with self._wanted_lock:
                for scrapes in self._wanted.values():
                    scrapes.body = None
            self._cache.clear()
            self._last.clear()
            self._cache_key = None

    def render(
        self, accept: str | None, accept_encoding: str | None, names: Sequence[str] | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """Body and headers for one scrape (content negotiation as prometheus_client does)."""
        negotiated = self._negotiated.get(accept or "")
        if negotiated is None:
            negotiated = negotiate_or_text(accept or "")
            if len(self._negotiated) < 64:  # Accept headers come from a handful of scrapers
                self._negotiated[accept or ""] = negotiated
        content_type = negotiated.content_type
        use_gzip = _gzip_accepted(accept_encoding)
        headers = {"Content-Type": content_type}
        if use_gzip:
            headers["Content-Encoding"] = "gzip"
        if names is not None:
            body = self._encode(negotiated, names)
            return (gzip.compress(body, 6) if use_gzip else body), headers
        key = (content_type, use_gzip)
        now = self._clock()
        with self._wanted_lock:
            scrapes = self._wanted.get(key)
            if scrapes is None:
                self._wanted[key] = scrapes = _Scrapes(negotiated, now)
                prepared = None
            else:
                prepared = scrapes.take_prepared(now)
                scrapes.interval, scrapes.last = now - scrapes.last, now
        if prepared is not None:
            return prepared, headers
        return self._get(self._state_key(), negotiated, use_gzip), headers

    def _state_key(self) -> tuple[object, ...]:
        if self._process is None:
            return (self.store.view().key,)
        return (self.store.view().key, int(self._clock() // PROCESS_REFRESH_SECONDS))

    def _get(
        self,
        state_key: tuple[object, ...],
        negotiated: Negotiated,
        use_gzip: bool,
    ) -> bytes:
        content_type = negotiated.content_type
        key = (content_type, use_gzip)
        if self._cache_key == state_key:
            cached = self._cache.get(key)
            if cached is not None:
                return cached
        previous = self._last.get(key)
        if previous is not None and not self._lock.acquire(blocking=False):
            # Another thread is rendering newer data right now: rather than queue
            # behind it, answer with the last complete body (milliseconds older).
            return previous
        if previous is None:
            self._lock.acquire()
        try:
            if self._cache_key != state_key:
                self._cache.clear()
                self._cache_key = state_key
            cached = self._cache.get(key)
            if cached is None:
                plain = self._cache.get((content_type, False))
                if plain is None:
                    plain = self._encode(negotiated)
                    self._cache[(content_type, False)] = plain
                    allocator.trim()
                cached = gzip.compress(plain, 6) if use_gzip else plain
                self._cache[key] = cached
                self._last[key] = cached
            return cached
        finally:
            self._lock.release()

    def start_prerender(self) -> None:
        """Render on a thread of its own, ahead of the scrapes.

        Every poll changes the store, and building the families for thousands of
        series takes tens of milliseconds: done here, the scrape path finds the
        bytes ready. The thread sleeps until the store changes; then each format
        asked for in the last ten minutes is rendered once before its next scrape
        is due (by the interval observed between its scrapes), with the data of
        that moment.
        """
        if self._prerender is None:
            self._stop_prerender.clear()
            self._prerender = threading.Thread(
                target=self._prerender_loop, name="prerender", daemon=True
            )
            self._prerender.start()

    def stop_prerender(self) -> None:
        """Stop the pre-render thread."""
        thread, self._prerender = self._prerender, None
        if thread is not None:
            self._stop_prerender.set()
            self.store.wake()
            thread.join(timeout=2.0)

    def _prerender_loop(self) -> None:
        generation = self.store.generation
        while not self._stop_prerender.is_set():
            generation = self.store.wait_changed(generation)
            try:
                self.prerender_due(wait=True)
            except Exception as exc:  # the scrape path renders on its own if this fails
                log.get(output="prometheus").error("pre-render failed", error=repr(exc))

    def prerender_due(self, wait: bool) -> None:
        """Render each format not yet prepared for its next scrape, when it is due.

        With ``wait``, waits for that moment and returns when all are prepared (or
        on stop); without, renders only what is due now.
        """
        while not self._stop_prerender.is_set():
            now = self._clock()
            pending = []
            with self._wanted_lock:
                for key, scrapes in list(self._wanted.items()):
                    if now - scrapes.last > PRERENDER_WANTED_SECONDS:
                        del self._wanted[key]
                    elif scrapes.prepared_for != scrapes.last:
                        pending.append((scrapes.due(), key, scrapes, scrapes.last))
            if not pending:
                return
            due, (_, use_gzip), scrapes, last = min(pending, key=lambda p: p[0])
            if due > now:
                if not wait:
                    return
                self._stop_prerender.wait(due - now)
                continue  # a scrape may have come meanwhile: look again
            body = self._get(self._state_key(), scrapes.negotiated, use_gzip)
            with self._wanted_lock:
                scrapes.body, scrapes.prepared_at, scrapes.prepared_for = body, self._clock(), last

    def _series(
        self,
        view: View,
        profile: Profile | None,
        names: Sequence[str] | None,
        process: int,
        peers: Sequence[tuple[str, Sequence[Family]]] = (),
    ) -> list[tuple[MetricSpec, Sequence[Reading]]]:
        """``accel_exporter_series``: what this body carries per source.

        The family itself and the process families count as the exporter's; each compat
        peer's series count under ``compat_<peer>`` (``compat_dcgm``, ``compat_amd``).
        """
        if profile is None or not profile.wants(SERIES):
            return []
        if names is not None and SERIES not in names:
            return []
        counts = profile.series(view)
        for peer, families in peers:
            found = sum(len(f.samples) for f in families)
            if found:
                key = f"compat_{peer}"
                counts[key] = counts.get(key, 0) + found
        counts[SELF_SOURCE] = (
            counts.get(SELF_SOURCE, 0) + len(counts) + (SELF_SOURCE not in counts) + process
        )
        return [(CATALOG[SERIES], [Reading(SERIES, (k,), float(v)) for k, v in counts.items()])]

    def _encode(self, negotiated: Negotiated, names: Sequence[str] | None = None) -> bytes:
        """The store's families (``names`` only, when given), compat ones, then the process's."""
        view = self.store.view()
        profile = self.profile
        found = rows(view, names, self.stamp, self.store.catalog, profile)
        process = self._process.rows() if self._process is not None and names is None else []
        # Every peer's families: accel_exporter_series counts the whole body's.
        peers = self.compat.by_peer(view) if self.compat is not None else []
        series = self._series(view, profile, names, len(process), peers)
        fmt = negotiated.fmt
        others = [f for _, fams in peers for f in fams if names is None or f.name in names]
        if fmt is None:
            # Only prometheus_client writes this escaping scheme: imported when asked.
            from exporter.outputs.prometheus_compat import encode_with_library

            body = encode_with_library(negotiated.accept, [*found, *series], bool(process))
            if not others:
                return body
            # Compat names are legacy names, which every escaping scheme keeps as they are.
            om = negotiated.content_type.startswith("application/openmetrics-text")
            extra = encode_compat(others, text_format.OPENMETRICS if om else text_format.TEXT)
            if om and body.endswith(text_format.EOF):
                return body[: -len(text_format.EOF)] + extra + text_format.EOF
            return body + extra
        # One body, joined once: the families' line caches point into it (text_format.Body).
        out = text_format.Body(fmt)
        out.families(found)
        out.families(series)
        out.raw(encode_compat(others, fmt))
        out.families(process)
        return out.finish(text_format.EOF if fmt == text_format.OPENMETRICS else b"")


def _gzip_accepted(header: str | None) -> bool:
    for part in (header or "").split(","):
        token = part.split(";")[0].strip().lower()
        if token == "gzip":
            q = [p.strip() for p in part.split(";")[1:] if p.strip().startswith("q=")]
            return not q or q[0] not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False
