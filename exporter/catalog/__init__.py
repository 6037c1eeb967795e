"""The metric catalog: every exported family is one row, grouped by domain.

The Prometheus collector, the OTel instruments, the generated docs and the tests
all read :data:`CATALOG`. Adding a metric means adding one row in the domain
module and the source code that fills it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from exporter.catalog import amd, ccl, device, exporter_self, host, nvidia, workload
from exporter.catalog.spec import UNITS, Kind, MetricSpec

__all__ = ["CATALOG", "UNITS", "Kind", "MetricSpec", "build", "spec"]

_DOMAINS = (exporter_self, host, device, nvidia, amd, ccl, workload)


def build(rows: Iterable[MetricSpec]) -> Mapping[str, MetricSpec]:
    """Index rows by name, refusing duplicates."""
    out: dict[str, MetricSpec] = {}
    for row in rows:
        if row.name in out:
            raise ValueError(f"duplicate catalog row {row.name}")
        out[row.name] = row
    return MappingProxyType(out)


CATALOG: Mapping[str, MetricSpec] = build(row for mod in _DOMAINS for row in mod.ROWS)


def spec(name: str) -> MetricSpec:
    """The row for ``name``; KeyError when it is not in the catalog."""
    return CATALOG[name]
