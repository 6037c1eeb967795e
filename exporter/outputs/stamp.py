"""Opt-in: stamp workload labels (namespace, pod, container) onto device series at render time.

The store keeps device series and attribution apart (``accel_device_workload_info``
is the join); with ``workload.k8s.stamp_device_series`` the Prometheus output adds
the allowlisted labels to every stampable family while rendering, through
:func:`exporter.catalog.workload.stamped`, so the catalog still says which
families may carry them. A device held by one container gets its names; a
device shared by several containers, or by none, gets empty values (one series
per device, so sums stay right).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exporter.catalog import MetricSpec
from exporter.catalog.workload import WORKLOAD_LABELS, stampable, stamped
from exporter.config.schema import Config
from exporter.model import Reading
from exporter.store import View

StampFactory = Callable[[View], "Stamping"]


class Stamping:
    """The labels to add for one view of the store."""

    def __init__(self, view: View, labels: Sequence[str]) -> None:
        self.labels = tuple(name for name in WORKLOAD_LABELS if name in labels)
        owners: dict[str, set[tuple[str, ...]]] = {}
        for reading in view.readings("accel_device_workload_info"):
            values = dict(zip(("device", "uuid", *WORKLOAD_LABELS), reading.labels, strict=False))
            owners.setdefault(values["uuid"], set()).add(tuple(values[k] for k in self.labels))
        self.empty = ("",) * len(self.labels)
        self.values = {uuid: next(iter(found)) for uuid, found in owners.items() if len(found) == 1}
        self._specs: dict[str, MetricSpec] = {}

    def apply(
        self, spec: MetricSpec, readings: Sequence[Reading]
    ) -> tuple[MetricSpec, Sequence[Reading]]:
        """The row and readings as rendered: stamped when the family allows it."""
        if not self.labels or not stampable(spec):
            return spec, readings
        row = self._specs.get(spec.name)
        if row is None:
            row = self._specs[spec.name] = stamped(spec, self.labels)
        return row, [
            Reading(r.metric, (*r.labels, *self.values.get(r.labels[1], self.empty)), r.value)
            for r in readings
        ]


def from_config(config: Config) -> StampFactory | None:
    """The stamping the config asks for, or None (the default)."""
    k8s = config.workload.k8s
    if not k8s.stamp_device_series or not k8s.stamp_labels:
        return None
    labels = tuple(k8s.stamp_labels)
    return lambda view: Stamping(view, labels)
