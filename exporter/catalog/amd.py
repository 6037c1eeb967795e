"""AMD-only device families (GTT, XGMI, per-block ECC, partitions, ...)."""

from __future__ import annotations

from exporter.catalog.spec import MetricSpec

ROWS: tuple[MetricSpec, ...] = ()
