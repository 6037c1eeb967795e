"""NVIDIA-only device families (NVLink, XID, MIG, retired pages, remapped rows, ...)."""

from __future__ import annotations

from exporter.catalog.spec import MetricSpec

ROWS: tuple[MetricSpec, ...] = ()
