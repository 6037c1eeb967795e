"""The shape of one catalog row: everything any output needs to know about a family."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from enum import Enum
from functools import cached_property
from types import MappingProxyType

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_LABEL = re.compile(r"^[a-z_][a-z0-9_]*$")

# Units written at the end of a family name, mapped to UCUM for OTel.
UNITS: dict[str, str] = {
    "bytes": "By",
    "seconds": "s",
    "watts": "W",
    "joules": "J",
    "celsius": "Cel",
    "hertz": "Hz",
    "ratio": "1",
    "bytes_per_second": "By/s",
    "transfers_per_second": "{transfer}/s",
    "": "1",
}


class Kind(str, Enum):
    """Metric type. ``info`` is a gauge of value 1 whose labels carry identity."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    INFO = "info"


class Instrument(str, Enum):
    """The OpenTelemetry instrument a family is exported as."""

    GAUGE = "gauge"
    COUNTER = "counter"
    UPDOWNCOUNTER = "updowncounter"
    HISTOGRAM = "histogram"


_UCUM_ANNOTATION = re.compile(r"^\{[a-z_]+\}$")


@dataclass(frozen=True)
class MetricSpec:
    """One exported family.

    ``name`` is the Prometheus name exactly as exposed (counters end in
    ``_total``). ``unit`` is one of :data:`UNITS`; a non-empty unit must be the
    name's suffix (before ``_total``). ``otel_name`` is the OpenTelemetry
    instrument name; empty means "derive a dotted name".

    The keyword-only fields complete the OpenTelemetry mapping where the rules
    in :mod:`exporter.catalog.otel` would not derive it (the instrument, a UCUM
    annotation of what a unit-less family counts, constant attributes, label
    renames, a semantic convention, an instrument's shared description), and
    ``values`` lists the allowed values of each label whose values are an
    enumeration (the store refuses any other, see :mod:`exporter.store`).
    ``max_series`` is the family's series budget per source (see
    :mod:`exporter.catalog.budget`), declared by every row with a label whose
    values are not enumerated.
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    otel_name: str = ""
    buckets: tuple[float, ...] = ()
    _: KW_ONLY
    # None: the instrument the kind implies (an up-down counter only by a convention's word).
    otel_instrument: Instrument | None = None
    # What a unit-less family counts, as a UCUM annotation ("{error}"); empty: the row's unit.
    otel_unit: str = ""
    # Attributes every data point carries (what tells apart families sharing one instrument).
    otel_constants: tuple[tuple[str, str], ...] = ()
    # label -> attribute key, beyond the rename every row gets (uuid -> hw.id).
    otel_attributes: tuple[tuple[str, str], ...] = ()
    # The name, instrument, unit and attributes follow an OpenTelemetry semantic convention.
    semconv: bool = False
    # The description of an instrument several families share (each help describes only itself).
    otel_description: str = ""
    # label -> every value it may take, for labels whose values are an enumeration.
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # Most label sets one source may export of this family (exporter.catalog.budget);
    # 0: not declared, for rows whose labels are all enumerated (bounded by them).
    max_series: int = 0

    def __post_init__(self) -> None:
        # Read-only once built: rows are shared by every output and thread.
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))
        problems = self.problems()
        if problems:
            raise ValueError(f"catalog row {self.name!r}: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Every rule this row breaks (empty when valid)."""
        out: list[str] = []
        if not _NAME.match(self.name):
            out.append("name must be snake_case")
        for label in self.labels:
            if not _LABEL.match(label) or label.startswith("__"):
                out.append(f"bad label name {label!r}")
        if len(set(self.labels)) != len(self.labels):
            out.append("duplicate label")
        if self.unit not in UNITS:
            out.append(f"unknown unit {self.unit!r}")
        base = self.name
        if self.kind is Kind.COUNTER:
            if not self.name.endswith("_total"):
                out.append("counter names end in _total")
            base = self.name[: -len("_total")]
        elif self.name.endswith("_total"):
            out.append("_total is reserved for counters")
        if self.kind is Kind.INFO and not self.name.endswith("_info"):
            out.append("info families end in _info")
        if self.unit and not base.endswith("_" + self.unit):
            out.append(f"name must end with its unit _{self.unit}")
        if self.kind is Kind.HISTOGRAM and not self.buckets:
            out.append("histograms need buckets")
        if not self.help.strip().endswith("."):
            out.append("help is a sentence ending with a period")
        if self.otel_unit and not _UCUM_ANNOTATION.match(self.otel_unit):
            out.append(f"otel_unit {self.otel_unit!r} is a UCUM annotation like {{error}}")
        if self.otel_unit and self.unit:
            out.append("otel_unit annotates unit-less families only")
        if self.max_series < 0:
            out.append("max_series is a count of label sets (0: bounded by enumerations)")
        for label, allowed in self.values.items():
            if label not in self.labels:
                out.append(f"values for {label!r}, which is not a label")
            elif not allowed or len(set(allowed)) != len(allowed):
                out.append(f"values of {label!r}: a non-empty list without repeats")
        return out

    @property
    def unbounded_labels(self) -> tuple[str, ...]:
        """The labels whose values are not enumerated (a row with any declares max_series)."""
        return tuple(label for label in self.labels if label not in self.values)

    @cached_property
    def enumerated(self) -> tuple[tuple[int, frozenset[str]], ...]:
        """(label position, allowed values) for every enumerated label, for validation."""
        return tuple(
            (self.labels.index(label), frozenset(allowed)) for label, allowed in self.values.items()
        )

    @property
    def family_name(self) -> str:
        """The name prometheus_client wants for the family (counters without ``_total``)."""
        if self.kind is Kind.COUNTER:
            return self.name[: -len("_total")]
        return self.name

    @property
    def ucum_unit(self) -> str:
        """The unit in UCUM notation, for OpenTelemetry."""
        return UNITS[self.unit]
