"""``accel-exporter once``: poll every enabled source once and print the result."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from exporter.catalog.spec import MetricSpec
from exporter.config import Config
from exporter.model import HistogramValue, Snapshot
from exporter.outputs.prometheus_setup import exposition_for
from exporter.scheduler import poll_once
from exporter.sources.base import Source
from exporter.sources.registry import build_sources, catalog_for
from exporter.store import Store


async def poll_all(sources: list[Source], store: Store | None = None) -> list[Snapshot]:
    """Start, poll once and close every source; a snapshot per source.

    Sources are polled in order into ``store`` (a scratch one by default), so an
    enricher polled after the device sources sees their data as in the daemon,
    and the caller can render the store afterwards.
    """
    results = []
    store = store if store is not None else Store()
    for source in sources:
        store.register(source.name)
        source.attach(store)
    try:
        for source in sources:
            await source.start()
        for source in sources:
            await source.wait_ready(getattr(source.config, "bootstrap_timeout", source.timeout))
            snapshot = await poll_once(source, store.catalog)
            if snapshot.outcome.pending:
                # No second poll comes: a source still not ready has failed this one.
                store.put(snapshot)
            else:
                store.record(snapshot)
            results.append(snapshot)
    finally:
        for source in sources:
            try:
                await asyncio.wait_for(source.close(), timeout=5)
            except Exception as exc:
                print(f"accel-exporter: closing {source.name} failed: {exc!r}", file=sys.stderr)
    return results


def to_json(results: list[Snapshot], catalog: Mapping[str, MetricSpec]) -> dict[str, Any]:
    """The ``--format json`` document (schema in docs/cli.md): per source, its readings.

    Labels are a mapping named by the catalog row, in the row's order.
    """
    out: dict[str, Any] = {}
    for snap in results:
        readings = []
        for r in snap.readings:
            value: Any = r.value
            if isinstance(value, HistogramValue):
                value = {"bounds": value.bounds, "counts": value.counts, "sum": value.total}
            names = catalog[r.metric].labels
            labels = dict(zip(names, r.labels, strict=True))
            readings.append({"metric": r.metric, "labels": labels, "value": value})
        out[snap.source] = {
            "ok": snap.ok,
            "unavailable": snap.outcome.unavailable,
            "reason": snap.outcome.reason,
            "detail": snap.outcome.detail,
            "duration_seconds": snap.duration,
            "readings": readings,
        }
    return out


def run(config: Config, fmt: str, out: TextIO = sys.stdout) -> int:
    """Exit 0 only when every enabled source succeeded (unavailable auto sources excepted)."""
    store = Store(catalog=catalog_for(config))
    results = asyncio.run(poll_all(build_sources(config), store))
    if fmt == "json":
        json.dump(to_json(results, store.catalog), out, indent=2)
        out.write("\n")
    else:
        # The daemon's own path: compat, cluster_name and workload_labels as /metrics has them.
        exposition = exposition_for(store, config, process_metrics=False)
        body, _ = exposition.render(None, None)
        out.write(body.decode())
    failed = False
    for snap in results:
        if snap.outcome.unavailable:
            print(
                f"accel-exporter: {snap.source}: unavailable: {snap.outcome.detail}",
                file=sys.stderr,
            )
        elif not snap.ok:
            failed = True
            print(
                f"accel-exporter: {snap.source}: {snap.outcome.reason}: {snap.outcome.detail}",
                file=sys.stderr,
            )
    return 1 if failed else 0
