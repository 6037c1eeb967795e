"""The shape of one catalog row: everything any output needs to know about a family."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

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
    "": "1",
}


class Kind(str, Enum):
    """Metric type. ``info`` is a gauge of value 1 whose labels carry identity."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    INFO = "info"


@dataclass(frozen=True)
class MetricSpec:
    """One exported family.

    ``name`` is the Prometheus name exactly as exposed (counters end in
    ``_total``). ``unit`` is one of :data:`UNITS`; a non-empty unit must be the
    name's suffix (before ``_total``). ``otel_name`` is the OpenTelemetry
    instrument name; empty means "derive a dotted name".
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    otel_name: str = ""
    buckets: tuple[float, ...] = ()

    def __post_init__(self) -> None:
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
        return out

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
