"""What the compat builders read from one store view: devices, their readings, their workloads.

Everything is indexed once per render from the view the exposition renders, so
the compat series carry the values of the same poll as our own (no second read)
and vanish with them when a source or device goes down.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.catalog.device import INFO_LABELS
from exporter.catalog.workload import WORKLOAD_LABELS
from exporter.family_names import (
    ACCEL_DEVICE_INFO,
    ACCEL_DEVICE_JOB_INFO,
    ACCEL_DEVICE_WORKLOAD_INFO,
)
from exporter.model import HistogramValue, Reading
from exporter.store import View


def node_name() -> str:
    """The host name both originals put on their series (NODE_NAME in Kubernetes, as they do)."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass(frozen=True)
class Workload:
    """Who holds one device: a container and/or a Slurm job (empty when unknown)."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    job_id: str = ""
    job_user: str = ""
    job_partition: str = ""


@dataclass
class Device:
    """One device of a vendor as the view shows it."""

    index: str
    uuid: str
    info: dict[str, str]
    workload: Workload = field(default_factory=Workload)


class Readings:
    """The view's readings of the families a builder asks for, by device uuid."""

    def __init__(self, view: View) -> None:
        self._view = view
        self._by_uuid: dict[str, dict[str, list[Reading]]] = {}

    def of(self, metric: str, uuid: str) -> list[Reading]:
        """The readings of ``metric`` for the device ``uuid`` (labels start with device, uuid)."""
        index = self._by_uuid.get(metric)
        if index is None:
            index = self._by_uuid[metric] = {}
            for reading in self._view.readings(metric):
                if len(reading.labels) > 1 and not isinstance(reading.value, HistogramValue):
                    index.setdefault(reading.labels[1], []).append(reading)
        return index.get(uuid, [])

    def one(self, metric: str, uuid: str, *dims: str) -> float | None:
        """The value of the reading of ``metric`` for ``uuid`` whose next labels are ``dims``."""
        for reading in self.of(metric, uuid):
            if _matches(reading.labels[2:], dims):
                return float(reading.value)  # type: ignore[arg-type]
        return None


def _matches(labels: Sequence[str], wanted: Sequence[str]) -> bool:
    return tuple(labels[: len(wanted)]) == tuple(wanted)


def _single(found: dict[str, set[tuple[str, ...]]], uuid: str) -> tuple[str, ...] | None:
    owners = found.get(uuid)
    # A device shared by several containers or jobs gets none: one series per device.
    return next(iter(owners)) if owners is not None and len(owners) == 1 else None


def devices(view: View, vendor: str) -> list[Device]:
    """The vendor's devices with their workloads, in device order."""
    pods: dict[str, set[tuple[str, ...]]] = {}
    for reading in view.readings(ACCEL_DEVICE_WORKLOAD_INFO):
        pods.setdefault(reading.labels[1], set()).add(reading.labels[2 : 2 + len(WORKLOAD_LABELS)])
    jobs: dict[str, set[tuple[str, ...]]] = {}
    for reading in view.readings(ACCEL_DEVICE_JOB_INFO):
        jobs.setdefault(reading.labels[1], set()).add(reading.labels[2:5])
    out = []
    for reading in view.readings(ACCEL_DEVICE_INFO):
        info = dict(zip(INFO_LABELS, reading.labels, strict=False))
        if info.get("vendor") != vendor:
            continue
        uuid = info["uuid"]
        pod = dict(zip(WORKLOAD_LABELS, _single(pods, uuid) or ("", "", ""), strict=True))
        job = _single(jobs, uuid) or ("", "", "")
        workload = Workload(pod["namespace"], pod["pod"], pod["container"], *job)
        out.append(Device(info["device"], uuid, info, workload))
    out.sort(key=lambda d: (int(d.index) if d.index.isdigit() else 1 << 30, d.index))
    return out
