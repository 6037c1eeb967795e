"""OpenTelemetry names for the catalog: the rules that turn a catalog row into an instrument.

The OTLP output builds its instruments from :data:`METRICS`, the docs table
(docs/otlp.md) is generated from it, and the tests invert it to compare OTLP
with /metrics. Whatever is particular to one family is written in its catalog
row (``otel_*`` and ``semconv`` fields of :class:`MetricSpec`); this module
holds only the rules, in order:

1. A family with an OpenTelemetry semantic convention uses it (``semconv=True``
   on the row): name, instrument, unit and the attributes the convention
   requires. Several families may share one instrument when the convention tells
   them apart by an attribute (``hw.gpu.utilization`` with ``hw.gpu.task`` =
   general / encoder / decoder).
2. Otherwise a dotted ``accel.*`` name: the row's ``otel_name`` where the
   derived name would read badly, else :func:`derive_name`. A family that counts
   things has the UCUM annotation of what it counts as its unit (``{error}``,
   ``{rank}``: the row's ``otel_unit``), others the row's own unit.
3. Attributes are the catalog labels, except the device UUID, which becomes the
   hardware convention's ``hw.id`` everywhere so that every device series joins
   on one key (plus the row's ``otel_attributes``, e.g. on ``accel_device_info``).

Values are never transformed: an OTLP data point carries exactly the number the
/metrics sample for the same snapshot carries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from exporter.catalog import CATALOG, Kind, MetricSpec
from exporter.catalog.spec import Instrument

__all__ = [
    "ATTRIBUTES",
    "INSTRUMENTS",
    "METRICS",
    "SEMCONV_VERSION",
    "Instrument",
    "OtelMetric",
    "build",
    "derive_name",
    "group",
    "instruments",
    "mapping",
    "problems",
]

# Semantic conventions release the hw.* names below were checked against.
SEMCONV_VERSION = "1.44.0"

_INSTRUMENT_NAME = re.compile(r"^[a-zA-Z][-_./a-zA-Z0-9]{0,254}$")
_UNIT = re.compile(r"^[\x21-\x7e]{1,63}$")


_BY_KIND = {
    Kind.GAUGE: Instrument.GAUGE,
    Kind.INFO: Instrument.GAUGE,
    Kind.COUNTER: Instrument.COUNTER,
    Kind.HISTOGRAM: Instrument.HISTOGRAM,
}

# Labels renamed on every row: the device UUID is the hardware conventions' hw.id.
ATTRIBUTES: Mapping[str, str] = MappingProxyType({"uuid": "hw.id"})


@dataclass(frozen=True)
class OtelMetric:
    """How one catalog family is exported over OTLP."""

    row: MetricSpec
    name: str
    instrument: Instrument
    unit: str
    # One attribute key per catalog label, in label order.
    keys: tuple[str, ...]
    constants: tuple[tuple[str, str], ...]
    semconv: bool
    description: str

    def attributes(self, labels: Iterable[str]) -> dict[str, str]:
        """The data point attributes for one reading's label values."""
        out = dict(zip(self.keys, labels, strict=True))
        out.update(self.constants)
        return out

    def labels(self, attributes: Mapping[str, object]) -> tuple[str, ...] | None:
        """The label values of a data point of this family, or None if it is another's."""
        if any(attributes.get(key) != value for key, value in self.constants):
            return None
        if set(attributes) != set(self.keys) | {key for key, _ in self.constants}:
            return None
        return tuple(str(attributes[key]) for key in self.keys)


def derive_name(row: MetricSpec) -> str:
    """``accel_exporter_source_poll_duration_seconds`` -> ``accel.exporter.source.poll.duration``.

    The type suffix (``_total``) and the unit suffix go (OTLP carries both as
    fields); every underscore becomes a namespace dot.
    """
    base = row.family_name
    if row.unit and base.endswith("_" + row.unit):
        base = base[: -len(row.unit) - 1]
    return base.replace("_", ".")


def mapping(row: MetricSpec) -> OtelMetric:
    """The OTLP mapping of one catalog row: its own OTel fields, else the derivation rules."""
    renames = {**ATTRIBUTES, **dict(row.otel_attributes)}
    return OtelMetric(
        row=row,
        name=row.otel_name or derive_name(row),
        instrument=row.otel_instrument or _BY_KIND[row.kind],
        unit=row.otel_unit or row.ucum_unit,
        keys=tuple(renames.get(label, label) for label in row.labels),
        constants=row.otel_constants,
        semconv=row.semconv,
        description=row.otel_description or row.help,
    )


def group(metrics: Iterable[OtelMetric]) -> dict[str, tuple[OtelMetric, ...]]:
    """Mappings by OTel instrument name, in catalog order."""
    out: dict[str, list[OtelMetric]] = {}
    for metric in metrics:
        out.setdefault(metric.name, []).append(metric)
    return {name: tuple(items) for name, items in out.items()}


def problems(metrics: Mapping[str, OtelMetric]) -> list[str]:
    """Every rule the mapping breaks (empty when valid)."""
    out: list[str] = []
    for name, members in group(metrics.values()).items():
        first = members[0]
        if not _INSTRUMENT_NAME.match(name):
            out.append(f"{name}: not a valid OpenTelemetry instrument name")
        for m in members:
            if not _UNIT.match(m.unit):
                out.append(f"{m.row.name}: unit {m.unit!r} is not a UCUM unit string")
            keys = list(m.keys) + [key for key, _ in m.constants]
            if len(set(keys)) != len(keys):
                out.append(f"{m.row.name}: attribute keys collide: {keys}")
            if name.startswith("hw.") and "hw.id" not in keys:
                out.append(f"{m.row.name}: hardware conventions require hw.id")
            if (m.row.kind is Kind.HISTOGRAM) != (m.instrument is Instrument.HISTOGRAM):
                out.append(f"{m.row.name}: histogram rows must stay histograms")
            if m.semconv != name.startswith("hw."):
                out.append(f"{m.row.name}: hw.* names are the semantic conventions', and only")
            renamed = [label for label, _ in m.row.otel_attributes if label not in m.row.labels]
            if renamed:
                out.append(f"{m.row.name}: renames labels it does not have: {renamed}")
        if len(members) == 1:
            continue
        shapes = {
            (m.instrument, m.unit, frozenset(m.keys) | {k for k, _ in m.constants}) for m in members
        }
        if len(shapes) != 1:
            out.append(f"{name}: merged families disagree on instrument, unit or attribute keys")
        if len({m.description for m in members}) != 1:
            out.append(f"{name}: merged families need one shared description")
        tags = [m.constants for m in members]
        if not all(tags) or len(set(tags)) != len(tags):
            out.append(f"{name}: merged families need distinct constant attributes")
        if first.row.kind is Kind.HISTOGRAM:
            out.append(f"{name}: histogram families cannot be merged")
    return out


def build(catalog: Mapping[str, MetricSpec] = CATALOG) -> Mapping[str, OtelMetric]:
    """The mapping of every row; ValueError listing every broken rule."""
    metrics = {name: mapping(row) for name, row in catalog.items()}
    found = problems(metrics)
    if found:
        raise ValueError("OTel mapping: " + "; ".join(found))
    return MappingProxyType(metrics)


METRICS: Mapping[str, OtelMetric] = build()
INSTRUMENTS: Mapping[str, tuple[OtelMetric, ...]] = MappingProxyType(group(METRICS.values()))


def instruments(catalog: Mapping[str, MetricSpec]) -> Mapping[str, tuple[OtelMetric, ...]]:
    """The instruments of ``catalog`` (a store's, with configured labels): INSTRUMENTS or new."""
    if catalog is CATALOG:
        return INSTRUMENTS
    return MappingProxyType(group(build(catalog).values()))
