"""Which catalog families a render writes, and their readings (stamped when configured)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from exporter import log
from exporter.catalog import CATALOG, MetricSpec
from exporter.model import Reading
from exporter.outputs.profile import Profile
from exporter.outputs.stamp import StampFactory
from exporter.store import View


def rows(
    view: View,
    names: Iterable[str] | None = None,
    stamp: StampFactory | None = None,
    catalog: Mapping[str, MetricSpec] = CATALOG,
    profile: Profile | None = None,
) -> Iterator[tuple[MetricSpec, Sequence[Reading]]]:
    """Every catalog row with readings and its readings, in catalog order.

    ``catalog`` is the store's (rows with configured labels); ``profile`` says
    which families are written and how they are thinned (every family, every
    row, without one); ``stamp`` (opt-in) adds workload labels to device
    families as they render. A row that fails to stamp is skipped and logged;
    it never breaks the scrape.
    """
    wanted = set(names) if names is not None else None
    stamping = stamp(view) if stamp is not None else None
    for name, row in catalog.items():
        if wanted is not None and name not in wanted and row.family_name not in wanted:
            continue
        readings: Sequence[Reading] = (
            view.readings(name) if profile is None else profile.readings(view, name)
        )
        if not readings:
            continue
        try:
            spec = row
            if stamping is not None:
                spec, readings = stamping.apply(row, readings)
        except Exception as exc:
            log.get(output="prometheus").error("family render failed", metric=name, error=repr(exc))
            continue
        yield spec, readings
