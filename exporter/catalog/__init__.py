"""The metric catalog: every exported family is one row, grouped by domain.

The Prometheus collector, the OTel instruments, the generated docs and the tests
all read :data:`CATALOG`. Adding a metric means adding one row in the domain
module and the source code that fills it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType

from exporter.catalog import ccl, device, diag, exporter_self, fabric, host, totals, workload
from exporter.catalog.spec import UNITS, Kind, MetricSpec
from exporter.vendors import VENDORS

__all__ = ["CATALOG", "DOMAINS", "UNITS", "Kind", "MetricSpec", "build", "spec", "with_rows"]


def _domains() -> tuple[ModuleType, ...]:
    """The domain modules in catalog order: the shared ones, each vendor's (exporter.vendors)."""
    vendors = [importlib.import_module(f"{__name__}.{vendor.catalog}") for vendor in VENDORS]
    # The per-device totals were written when NVIDIA and AMD were the only vendors with
    # links, and render after their rows: they stay there, so no node's exposition
    # changes order.
    at = [vendor.name for vendor in VENDORS].index("amdsmi") + 1
    return (
        exporter_self,
        host,
        device,
        *vendors[:at],
        totals,
        *vendors[at:],
        ccl,
        diag,
        workload,
        fabric,
    )


# Every domain module; one that sets FROM_WORKERS holds rows a device worker may send.
DOMAINS = _domains()


def build(rows: Iterable[MetricSpec]) -> Mapping[str, MetricSpec]:
    """Index rows by name, refusing duplicates."""
    out: dict[str, MetricSpec] = {}
    for row in rows:
        if row.name in out:
            raise ValueError(f"duplicate catalog row {row.name}")
        out[row.name] = row
    return MappingProxyType(out)


CATALOG: Mapping[str, MetricSpec] = build(row for mod in DOMAINS for row in mod.ROWS)


def spec(name: str) -> MetricSpec:
    """The row for ``name``; KeyError when it is not in the catalog."""
    return CATALOG[name]


def with_rows(
    rows: Iterable[MetricSpec], base: Mapping[str, MetricSpec] = CATALOG
) -> Mapping[str, MetricSpec]:
    """``base`` with some rows given their configured labels (fixed when the daemon starts).

    Only a row's labels may change, and only by appending to the catalog's own
    (``accel_pod_labels_info`` gets one ``label_<key>`` per configured key): the
    name, type, unit and the labels every user can rely on stay as documented.
    """
    out = dict(base)
    for row in rows:
        known = base.get(row.name)
        if known is None:
            raise ValueError(f"{row.name} is not in the catalog")
        if (row.kind, row.unit, row.labels[: len(known.labels)]) != (
            known.kind,
            known.unit,
            known.labels,
        ):
            raise ValueError(f"{row.name}: only labels may be appended to the catalog row")
        out[row.name] = row
    return MappingProxyType(out)
