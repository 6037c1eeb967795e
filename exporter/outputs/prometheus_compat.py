"""prometheus_client's own encoding of the store, for what the daemon does not write itself.

:mod:`exporter.outputs.text_format` writes the formats nearly every scraper asks
for. An Accept header with an escaping scheme that rewrites names (``dots``,
``values``) gets the library's encoder instead, over the same rows, and tests
use the library as the oracle of the daemon's own writer. Imported only then:
the library's import pulls in its push-gateway client (urllib.request,
hashlib), about 2 MiB of resident memory the daemon otherwise does not carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

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
from exporter.outputs.rows import rows
from exporter.outputs.stamp import StampFactory
from exporter.outputs.text_format import le_bound
from exporter.store import Store, View


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
            buckets = [(le_bound(b), c) for b, c in zip(hist.bounds, hist.counts, strict=False)]
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
    """prometheus_client families for :func:`rows` (a row that fails is skipped and logged)."""
    for spec, readings in rows(view, names, stamp, catalog):
        try:
            yield family(spec, readings)
        except Exception as exc:
            log.get(output="prometheus").error(
                "family render failed", metric=spec.name, error=repr(exc)
            )


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


class _Given:
    """Families already built, as a collector (what an encoder iterates)."""

    def __init__(self, fams: Sequence[Metric]) -> None:
        self.fams = fams

    def collect(self) -> Iterator[Metric]:
        return iter(self.fams)


def encode_with_library(
    accept: str,
    found: Iterable[tuple[MetricSpec, Sequence[Reading]]],
    process: bool,
) -> bytes:
    """What prometheus_client writes for ``accept``: ``found``'s families, then the process's."""
    encoder, _ = choose_encoder(accept)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Given([family(spec, readings) for spec, readings in found]))
    if process:
        ProcessCollector(registry=registry)
    return encoder(registry)
