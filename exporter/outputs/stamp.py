"""Opt-in: stamp workload labels (namespace, pod, container) onto device series at render time.

The store keeps device series and attribution apart (``accel_device_workload_info``
is the join); with ``workload.k8s.stamp_device_series`` the Prometheus output (and the
OTLP push, as attributes with a value) adds
the allowlisted labels to every stampable family while rendering, through
:func:`exporter.catalog.workload.stamped`, so the catalog still says which
families may carry them. A device held by one container gets its names; a
device shared by several containers, or by none, gets empty values (one series
per device, so sums stay right).

``outputs.prometheus.workload_labels`` stamps all three and the Slurm ``job_id``
(from ``accel_device_job_info``), the labels dcgm-exporter and AMD's exporter put
on their device series.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from exporter.catalog import MetricSpec
from exporter.catalog.workload import WORKLOAD_LABELS, stampable, stamped
from exporter.config.root import Config
from exporter.family_names import ACCEL_DEVICE_JOB_INFO, ACCEL_DEVICE_WORKLOAD_INFO
from exporter.model import Reading
from exporter.store import View

StampFactory = Callable[[View], "Stamping"]
# The Slurm job label workload_labels adds (accel_device_job_info's job_id).
JOB_LABEL = "job_id"


class Stamping:
    """The labels to add for one view of the store."""

    def __init__(self, view: View, labels: Sequence[str], job_id: bool = False) -> None:
        pod_labels = tuple(name for name in WORKLOAD_LABELS if name in labels)
        self.labels = (*pod_labels, JOB_LABEL) if job_id else pod_labels
        owners: dict[str, set[tuple[str, ...]]] = {}
        for reading in view.readings(ACCEL_DEVICE_WORKLOAD_INFO):
            values = dict(zip(("device", "uuid", *WORKLOAD_LABELS), reading.labels, strict=False))
            owners.setdefault(values["uuid"], set()).add(tuple(values[k] for k in pod_labels))
        pods = _single(owners)
        jobs: dict[str, set[tuple[str, ...]]] = {}
        if job_id:
            for reading in view.readings(ACCEL_DEVICE_JOB_INFO):
                jobs.setdefault(reading.labels[1], set()).add((reading.labels[2],))
        held = _single(jobs)
        self.empty = ("",) * len(self.labels)
        pod_empty, job_empty = ("",) * len(pod_labels), ("",) if job_id else ()
        self.values = {
            uuid: (*pods.get(uuid, pod_empty), *held.get(uuid, job_empty))
            for uuid in {*pods, *held}
        }
        self._specs: dict[str, MetricSpec] = {}

    def extra(self, uuid: str) -> dict[str, str]:
        """The stamped labels of the device ``uuid`` with a value (OTLP attributes)."""
        values = self.values.get(uuid, self.empty)
        return {k: v for k, v in zip(self.labels, values, strict=True) if v}

    def apply(
        self, spec: MetricSpec, readings: Sequence[Reading]
    ) -> tuple[MetricSpec, Sequence[Reading]]:
        """The row and readings as rendered: stamped when the family allows it."""
        if not stamps(self, spec):
            return spec, readings
        row = self._specs.get(spec.name)
        if row is None:
            pods = tuple(label for label in self.labels if label != JOB_LABEL)
            row = stamped(spec, pods) if pods else spec
            if JOB_LABEL in self.labels:
                row = dataclasses.replace(row, labels=(*row.labels, JOB_LABEL))
            self._specs[spec.name] = row
        return row, [
            Reading(r.metric, (*r.labels, *self.values.get(r.labels[1], self.empty)), r.value)
            for r in readings
        ]


def stamps(stamping: Stamping, spec: MetricSpec) -> bool:
    """Whether ``stamping`` adds labels to the family ``spec`` (as :meth:`Stamping.apply`)."""
    return bool(stamping.labels) and stampable(spec) and JOB_LABEL not in spec.labels


def _single(owners: dict[str, set[tuple[str, ...]]]) -> dict[str, tuple[str, ...]]:
    """The owner of each device held by exactly one."""
    return {uuid: next(iter(found)) for uuid, found in owners.items() if len(found) == 1}


def from_config(config: Config) -> StampFactory | None:
    """The stamping the config asks for, or None (the default)."""
    if config.outputs.prometheus.workload_labels:
        return lambda view: Stamping(view, WORKLOAD_LABELS, job_id=True)
    k8s = config.workload.k8s
    if not k8s.stamp_device_series or not k8s.stamp_labels:
        return None
    labels = tuple(k8s.stamp_labels)
    return lambda view: Stamping(view, labels)
