"""Workload attribution (Kubernetes, Slurm) and CUDA checkpoint families."""

from __future__ import annotations

from exporter.catalog.spec import MetricSpec

ROWS: tuple[MetricSpec, ...] = ()
