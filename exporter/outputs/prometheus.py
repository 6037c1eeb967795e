"""Prometheus exposition built from the catalog and the store, cached per store view.

Render is pure: it reads a :class:`~exporter.store.View` and nothing else. The
bytes for each (view, format, compression) are built once and then served to
every scrape until the store changes, so a scrape costs little more than a
socket write no matter how many clients ask at once.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

from exporter import log
from exporter.catalog import CATALOG, Kind, MetricSpec
from exporter.model import HistogramValue, Reading
from exporter.outputs.stamp import StampFactory
from exporter.store import Store, View

# Process metrics (RSS, CPU) change continuously; refreshing them this often
# keeps the exposition cacheable between store changes.
PROCESS_REFRESH_SECONDS = 5.0
# How often the pre-render thread looks for changed data, and how long a format
# nobody asks for any more is still prepared.
PRERENDER_POLL_SECONDS = 0.05
PRERENDER_WANTED_SECONDS = 600.0


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


def family(spec: MetricSpec, readings: Sequence[Reading]) -> Metric:
    """One prometheus_client family for a catalog row and its readings."""
    unit = spec.unit
    labels = list(spec.labels)
    fam: Metric
    if spec.kind is Kind.COUNTER:
        fam = CounterMetricFamily(spec.family_name, spec.help, labels=labels, unit=unit)
        for r in readings:
            fam.add_metric(list(r.labels), _scalar(r))
    elif spec.kind is Kind.HISTOGRAM:
        fam = HistogramMetricFamily(spec.name, spec.help, labels=labels, unit=unit)
        for r in readings:
            hist = r.value
            assert isinstance(hist, HistogramValue)
            buckets = [(_bound(b), c) for b, c in zip(hist.bounds, hist.counts, strict=False)]
            buckets.append(("+Inf", hist.counts[-1]))
            fam.add_metric(list(r.labels), buckets, hist.total)
    else:
        fam = GaugeMetricFamily(spec.name, spec.help, labels=labels, unit=unit)
        for r in readings:
            fam.add_metric(list(r.labels), _scalar(r))
    return fam


def _scalar(reading: Reading) -> float:
    value = reading.value
    assert not isinstance(value, HistogramValue), reading.metric
    return value


def families(
    view: View,
    names: Iterable[str] | None = None,
    stamp: StampFactory | None = None,
    catalog: Mapping[str, MetricSpec] = CATALOG,
) -> Iterator[Metric]:
    """Families for every catalog row with readings, in catalog order.

    ``catalog`` is the store's (rows with configured labels); ``stamp`` (opt-in)
    adds workload labels to device families as they render. A row that fails
    to render is skipped and logged; it never breaks the scrape.
    """
    wanted = set(names) if names is not None else None
    stamping = stamp(view) if stamp is not None else None
    for name, row in catalog.items():
        if wanted is not None and name not in wanted and row.family_name not in wanted:
            continue
        readings: Sequence[Reading] = view.readings(name)
        if not readings:
            continue
        try:
            spec = row
            if stamping is not None:
                spec, readings = stamping.apply(row, readings)
            yield family(spec, readings)
        except Exception as exc:
            log.get(output="prometheus").error("family render failed", metric=name, error=repr(exc))


class StoreCollector:
    """prometheus_client collector over the store (registered on our own registry)."""

    def __init__(
        self,
        store: Store,
        names: Iterable[str] | None = None,
        stamp: StampFactory | None = None,
    ) -> None:
        self.store = store
        self.names = list(names) if names is not None else None
        self.stamp = stamp

    def describe(self) -> list[Metric]:
        """Nothing: describing would make the registry call collect() at registration."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Families for the current store view."""
        yield from families(self.store.view(), self.names, self.stamp, self.store.catalog)


class Exposition:
    """Serves exposition bytes, rebuilt only when the store view changes."""

    def __init__(
        self,
        store: Store,
        process_metrics: bool = True,
        clock: Callable[[], float] = time.monotonic,
        stamp: StampFactory | None = None,
    ) -> None:
        self.store = store
        self._clock = clock
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = StoreCollector(store, stamp=stamp)
        self.registry.register(self._collector)
        self._process = CollectorRegistry(auto_describe=False) if process_metrics else None
        if self._process is not None:
            ProcessCollector(registry=self._process)
        self._lock = threading.Lock()
        self._cache: dict[tuple[object, ...], bytes] = {}
        self._cache_key: tuple[object, ...] | None = None
        self._encoders: dict[str, tuple[Callable[[CollectorRegistry], bytes], str]] = {}
        # (content type, gzip) -> (encoder, last asked for): what to pre-render.
        self._wanted: dict[
            tuple[str, bool], tuple[Callable[[CollectorRegistry], bytes], float]
        ] = {}
        self._prerender: threading.Thread | None = None
        # The newest complete body per format, served while a newer one is rendered.
        self._last: dict[tuple[str, bool], bytes] = {}
        self._stop_prerender = threading.Event()

    def set_stamp(self, stamp: StampFactory | None) -> None:
        """Change the opt-in label stamping (config reload); drops cached bodies."""
        with self._lock:
            self._collector.stamp = stamp
            self._cache.clear()
            self._last.clear()
            self._cache_key = None

    def _registries(self, names: Sequence[str] | None) -> CollectorRegistry:
        if names is None:
            return self.registry
        reg = CollectorRegistry(auto_describe=False)
        reg.register(StoreCollector(self.store, names, self._collector.stamp))
        return reg

    def render(
        self, accept: str | None, accept_encoding: str | None, names: Sequence[str] | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """Body and headers for one scrape (content negotiation as prometheus_client does)."""
        negotiated = self._encoders.get(accept or "")
        if negotiated is None:
            try:
                negotiated = choose_encoder(accept or "")
            except (TypeError, ValueError):
                # prometheus_client compares a malformed OpenMetrics version (``version=x``)
                # as text against numbers; such a scraper gets the text format.
                negotiated = choose_encoder("")
            if len(self._encoders) < 64:  # Accept headers come from a handful of scrapers
                self._encoders[accept or ""] = negotiated
        encoder, content_type = negotiated
        use_gzip = _gzip_accepted(accept_encoding)
        headers = {"Content-Type": content_type}
        if use_gzip:
            headers["Content-Encoding"] = "gzip"
        if names is not None:
            body = encoder(self._registries(names))
            return (gzip.compress(body, 6) if use_gzip else body), headers
        key = (content_type, use_gzip)
        self._wanted[key] = (encoder, self._clock())
        return self._get(self._state_key(), encoder, content_type, use_gzip), headers

    def _state_key(self) -> tuple[object, ...]:
        return (self.store.view().key, int(self._clock() // PROCESS_REFRESH_SECONDS))

    def _get(
        self,
        state_key: tuple[object, ...],
        encoder: Callable[[CollectorRegistry], bytes],
        content_type: str,
        use_gzip: bool,
    ) -> bytes:
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
                    plain = self._encode(encoder)
                    self._cache[(content_type, False)] = plain
                cached = gzip.compress(plain, 6) if use_gzip else plain
                self._cache[key] = cached
                self._last[key] = cached
            return cached
        finally:
            self._lock.release()

    def start_prerender(self) -> None:
        """Render on a thread of its own whenever the data changes.

        Every poll changes the store, and building the families for thousands of
        series takes tens of milliseconds: done here, ahead of the scrapes, the
        scrape path finds the bytes ready. Only the formats scrapers asked for in
        the last ten minutes are prepared.
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
            thread.join(timeout=2.0)

    def _prerender_loop(self) -> None:
        while not self._stop_prerender.wait(PRERENDER_POLL_SECONDS):
            try:
                state_key = self._state_key()
                if state_key == self._cache_key:
                    continue
                now = self._clock()
                for (content_type, use_gzip), (encoder, used) in list(self._wanted.items()):
                    if now - used > PRERENDER_WANTED_SECONDS:
                        del self._wanted[(content_type, use_gzip)]
                        continue
                    self._get(state_key, encoder, content_type, use_gzip)
            except Exception as exc:  # the scrape path renders on its own if this fails
                log.get(output="prometheus").error("pre-render failed", error=repr(exc))

    def _encode(self, encoder: Callable[[CollectorRegistry], bytes]) -> bytes:
        if self._process is None:
            return encoder(self.registry)
        merged = CollectorRegistry(auto_describe=False)
        merged.register(_Chain(self.registry, self._process))
        return encoder(merged)


class _Chain:
    """Collects several registries as one (so OpenMetrics gets a single # EOF)."""

    def __init__(self, *registries: CollectorRegistry) -> None:
        self.registries = registries

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        for registry in self.registries:
            yield from registry.collect()


def _gzip_accepted(header: str | None) -> bool:
    for part in (header or "").split(","):
        token = part.split(";")[0].strip().lower()
        if token == "gzip":
            q = [p.strip() for p in part.split(";")[1:] if p.strip().startswith("q=")]
            return not q or q[0] not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False
