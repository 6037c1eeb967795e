"""The series budget, enforced: at most ``max_series`` label sets per family in a snapshot.

The budget is declared in the catalog (``MetricSpec.max_series``, the sizes in
:mod:`exporter.catalog.budget`); the store applies it to every snapshot a source
hands it (:meth:`exporter.store.Store.put` and its siblings), so a budget holds for
every output, Prometheus and OTLP alike.

**Which series are kept** is the source's order: the first ``max_series`` distinct
label sets of a family, in the order the snapshot holds them, and every reading of
those (a repeated label set is the same series). The rest are dropped and their
count reported, per family, to the store, which adds it to
``accel_exporter_series_dropped_total{source,family}``. A source that can exceed a
budget therefore puts its most important series first (RAS: the worst
communicators), and the result is the same for the same snapshot every time.

The check costs nothing for a snapshot smaller than the smallest budget, else one
counting pass over the snapshot's family names (C speed, about 0.2 us a reading); only
a family with more readings than its budget is looked at label set by label set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter

from exporter.catalog import MetricSpec
from exporter.model import Reading

_METRIC = attrgetter("metric")


def limits(catalog: Mapping[str, MetricSpec]) -> dict[str, int]:
    """The declared budget of each family, for the rows that declare one."""
    return {name: row.max_series for name, row in catalog.items() if row.max_series > 0}


def enforce(
    readings: Sequence[Reading], budget: Mapping[str, int]
) -> tuple[Sequence[Reading], dict[str, int]]:
    """The readings within budget (``readings`` itself when all are) and family -> dropped.

    ``dropped`` counts the label sets past the budget (series, not readings).
    """
    if not budget or len(readings) <= min(budget.values()):
        return readings, {}  # fewer readings than the smallest budget: nothing can be over
    over = {
        name: budget[name]
        for name, count in Counter(map(_METRIC, readings)).items()
        if count > budget.get(name, count)
    }
    if not over:
        return readings, {}
    kept: list[Reading] = []
    seen: dict[str, set[tuple[str, ...]]] = {name: set() for name in over}
    dropped: dict[str, set[tuple[str, ...]]] = {}
    for reading in readings:
        held = seen.get(reading.metric)
        if held is None or reading.labels in held:
            kept.append(reading)
        elif len(held) < over[reading.metric]:
            held.add(reading.labels)
            kept.append(reading)
        else:
            dropped.setdefault(reading.metric, set()).add(reading.labels)
    return tuple(kept), {name: len(labels) for name, labels in dropped.items()}
