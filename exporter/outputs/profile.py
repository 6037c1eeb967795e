"""A store view as one profile writes it.

Families left out, per-link rows thinned, per-device totals derived, and the
samples each source contributes counted.

Shared by the Prometheus exposition and the OTLP batches, so both outputs of one
profile carry the same series.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exporter.catalog import CATALOG, Kind, MetricSpec
from exporter.catalog.profiles import DEFAULT_PROFILE, Selection, Sparse, select
from exporter.catalog.totals import TOTALS, Total
from exporter.config.outputs import ProfileConfig
from exporter.model import HistogramValue, Reading
from exporter.store import View

_TOTALS: Mapping[str, Total] = {total.row.name: total for total in TOTALS}


def samples_of(reading: Reading) -> int:
    """Lines one reading becomes in the text format (a histogram: buckets, count, sum)."""
    value = reading.value
    if isinstance(value, HistogramValue):
        extra = 0 if value.bounds and value.bounds[0] < 0 else 2
        return len(value.bounds) + 1 + extra
    return 1


def _total(total: Total, readings: Sequence[Reading], labels: Sequence[str]) -> list[Reading]:
    at = labels.index(total.over)
    sums: dict[tuple[str, ...], float] = {}
    for reading in readings:
        value = reading.value
        if isinstance(value, HistogramValue):
            continue
        key = reading.labels[:at] + reading.labels[at + 1 :]
        sums[key] = sums.get(key, 0.0) + value
    return [Reading(total.row.name, key, value) for key, value in sums.items()]


def _total_count(total: Total, readings: Sequence[Reading], labels: Sequence[str]) -> int:
    """How many readings :func:`_total` returns."""
    at = labels.index(total.over)
    return len(
        {
            r.labels[:at] + r.labels[at + 1 :]
            for r in readings
            if not isinstance(r.value, HistogramValue)
        }
    )


def _sparse(rule: Sparse, readings: Sequence[Reading]) -> list[Reading]:
    counted = {
        r.labels[: rule.by] for r in readings if not isinstance(r.value, HistogramValue) and r.value
    }
    return [r for r in readings if r.labels[: rule.by] in counted]


class Profile:
    """Reads a view through a :class:`~exporter.catalog.profiles.Selection`."""

    def __init__(self, selection: Selection, catalog: Mapping[str, MetricSpec] = CATALOG) -> None:
        self.selection = selection
        self.catalog = catalog

    @classmethod
    def named(
        cls,
        profile: str = DEFAULT_PROFILE,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        catalog: Mapping[str, MetricSpec] = CATALOG,
    ) -> Profile:
        """The profile by name with its include/exclude lists (checked by the config)."""
        return cls(select(profile, include, exclude, catalog), catalog)

    @classmethod
    def from_config(
        cls, config: ProfileConfig, catalog: Mapping[str, MetricSpec] = CATALOG
    ) -> Profile:
        """The profile an output's configuration names."""
        return cls.named(config.profile, config.include, config.exclude, catalog)

    def wants(self, name: str) -> bool:
        """Whether the family is written at all."""
        return name in self.selection.families

    def readings(self, view: View, name: str) -> Sequence[Reading]:
        """The family's readings as written: derived for a total, thinned when sparse."""
        if name not in self.selection.families:
            return []
        total = _TOTALS.get(name)
        if total is not None:
            detail = self.catalog.get(total.detail)
            found: Sequence[Reading] = view.readings(total.detail)
            found = _total(total, found, detail.labels) if found and detail else []
        else:
            found = view.readings(name)
        rule = self.selection.sparse.get(name)
        return _sparse(rule, found) if rule is not None and found else found

    def series(self, view: View) -> dict[str, int]:
        """Samples written per source for ``view`` (a total counts for its links' source)."""
        counts: dict[str, int] = {}
        families = self.selection.families
        for source, part in view.parts:
            by_family: dict[str, list[Reading]] = {}
            for reading in part:
                by_family.setdefault(reading.metric, []).append(reading)
            count = 0
            for name, readings in by_family.items():
                if name in families:
                    rule = self.selection.sparse.get(name)
                    kept = _sparse(rule, readings) if rule is not None else readings
                    row = self.catalog.get(name)
                    # Counted per render: a line per reading but for histograms.
                    if row is not None and row.kind is not Kind.HISTOGRAM:
                        count += len(kept)
                    else:
                        count += sum(samples_of(r) for r in kept)
            for name, total in _TOTALS.items():
                detail = self.catalog.get(total.detail)
                if name in families and total.detail in by_family and detail is not None:
                    rule = self.selection.sparse.get(name)
                    if rule is None:  # the totals' number without summing them
                        count += _total_count(total, by_family[total.detail], detail.labels)
                        continue
                    kept = _total(total, by_family[total.detail], detail.labels)
                    count += len(_sparse(rule, kept))
            counts[source] = counts.get(source, 0) + count
        return counts
