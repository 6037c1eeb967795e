"""NCCL/RCCL job health (RAS) and collective performance (Inspector) families."""

from __future__ import annotations

from exporter.catalog.spec import MetricSpec

ROWS: tuple[MetricSpec, ...] = ()
