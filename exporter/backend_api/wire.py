"""Readings as a device backend returns them (the shapes: exporter.sources.device).

A reply's readings map each family to one flat list of rows: the device's
position in the inventory, the family's other label values, the value. A
backend adds every device's rows to the reply's lists as it reads them; a
device found down half-way has its rows dropped again.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from exporter.catalog import DOMAINS
from exporter.catalog.device import DAEMON_OWNED, ID

# family -> [position, label..., value, position, label..., value, ...]
Rows = dict[str, list[Any]]


def new_rows() -> Rows:
    """An empty collection of rows, which gives a family its list on first use."""
    return defaultdict(list)


# The families a backend may send, with the width of a row: its label count, the
# two identity labels (device, uuid) being replaced by one inventory position.
# Only the domains of device backends (a catalog module with FROM_WORKERS): workload
# attribution and the rest come from other sources. Never the families the daemon
# derives itself (DAEMON_OWNED: up, down reasons, the health verdict).
ROW_WIDTH: dict[str, int] = {
    spec.name: len(spec.labels)
    for module in DOMAINS
    if getattr(module, "FROM_WORKERS", False)
    for spec in module.ROWS
    if spec.labels[: len(ID)] == ID and spec.name not in DAEMON_OWNED
}


def merge(into: Rows, part: Rows) -> None:
    """Append the rows of ``part`` to ``into``; ``part`` is spent (its lists may be reused)."""
    for metric, rows in part.items():
        target = into.get(metric)
        if target is None:
            into[metric] = rows
        else:
            target += rows


def put(rows: Rows, metric: str, prefix: tuple[Any, ...], value: float) -> None:
    """Append one row: ``prefix`` (position and labels) and the value."""
    target = rows.setdefault(metric, [])
    target += prefix
    target.append(value)


def drop(rows: Rows, position: int) -> None:
    """Remove every row of the device at ``position`` (found down after some were added)."""
    for metric, items in rows.items():
        width = ROW_WIDTH[metric]
        items[:] = [
            item
            for start in range(0, len(items), width)
            if items[start] != position
            for item in items[start : start + width]
        ]
