"""Helpers every backend shares; the protocol a backend fulfils is in the layer below.

The :class:`Backend` protocol and its errors live in :mod:`exporter.backend_api.backend`,
which the worker process imports too (a worker imports no backend module), and the
inventory's identities in :mod:`exporter.backend_api.inventory`, which the daemon's
Neuron reader uses too; they are named here as well so that a backend finds all it
builds on in one import.
"""

from __future__ import annotations

from exporter.backend_api.backend import (
    INVENTORY_CHANGED,
    Backend,
    BackendError,
    BackendUnavailable,
    InventoryChanged,
)
from exporter.backend_api.inventory import unique_uuids

__all__ = [
    "INVENTORY_CHANGED",
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "InventoryChanged",
    "unique_uuids",
]
