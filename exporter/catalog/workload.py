"""Workload attribution (Kubernetes, Slurm) and CUDA checkpoint families.

Attribution is exported as join metrics (``*_info`` of value 1) rather than as
labels on every device series, so a busy node's pod churn does not multiply the
device series; PromQL joins them on ``uuid`` (and ``pid``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from exporter.catalog import budget
from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec

WORKLOAD_LABELS = ("namespace", "pod", "container")
PROCESS_WORKLOAD_LABELS = (
    *ID,
    "pid",
    *WORKLOAD_LABELS,
    "pod_uid",
    "container_id",
    "job_id",
    "user",
)

# The identity of a pod on accel_pod_labels_info; the configured label_<key> labels follow.
POD_LABEL_IDENTITY = ("namespace", "pod")
POD_LABEL_PREFIX = "label_"
_NOT_LABEL_CHAR = re.compile(r"[^a-z0-9_]")

# The states of cuCheckpointProcessGetState, in CUprocessState order.
CHECKPOINT_STATES = (
    "running",
    "locked",
    "checkpointed",
    "failed",
    "checkpointing",
    "restoring",
)

ROWS = (
    MetricSpec(
        "accel_device_workload_info",
        Kind.INFO,
        "A Kubernetes container the kubelet assigned this device to; always 1. Join on uuid.",
        (*ID, *WORKLOAD_LABELS),
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_mig_workload_info",
        Kind.INFO,
        "A Kubernetes container the kubelet assigned this MIG device to; always 1."
        " Join on uuid and gpu_instance with the accel_mig_* series.",
        (*ID, "gpu_instance", "compute_instance", *WORKLOAD_LABELS),
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_device_claim_info",
        Kind.INFO,
        "A Kubernetes container holding this device through a DRA ResourceClaim, with the"
        " claim and the DRA device (driver, pool, dra_device) the kubelet reported; always 1."
        " Join on uuid.",
        (*ID, *WORKLOAD_LABELS, "claim_namespace", "claim", "driver", "pool", "dra_device"),
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_workload_memory_used_bytes",
        Kind.GAUGE,
        "Device memory used by a Kubernetes container's processes on this device (a shared"
        " GPU: time-slicing, MPS clients, MIG), summed from the per-process readings through"
        " each process's cgroup. Needs processes: true; NVIDIA and AMD report per-process memory.",
        (*ID, *WORKLOAD_LABELS),
        unit="bytes",
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_workload_utilization_ratio",
        Kind.GAUGE,
        "SM utilization of a Kubernetes container's processes on this device, as a share of"
        " the device, summed from the per-process samples (at most 1). NVIDIA only (needs"
        " processes: true).",
        (*ID, *WORKLOAD_LABELS),
        unit="ratio",
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_process_workload_info",
        Kind.INFO,
        "The workload a process on a device belongs to (pod from its cgroup, Slurm job from its"
        " cgroup or environment); labels not known are empty; always 1.",
        PROCESS_WORKLOAD_LABELS,
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_device_job_info",
        Kind.INFO,
        "A Slurm job running on this device; always 1. Join on uuid.",
        (*ID, "job_id", "user", "partition"),
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_pod_labels_info",
        Kind.INFO,
        "Kubernetes labels of a pod that uses an accelerator on this node: one label_<key>"
        " label per key of workload.k8s.pod_labels.keys (empty when the pod lacks it); always 1."
        " Join on namespace and pod.",
        POD_LABEL_IDENTITY,
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_workload_attribution_errors_total",
        Kind.COUNTER,
        "Attribution lookups that failed, by reason; the affected labels are left out.",
        ("reason",),
        otel_unit="{error}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_process_checkpoint_state",
        Kind.GAUGE,
        "CUDA checkpoint state of a GPU process, one-hot: 1 for the current state, else 0.",
        ("uuid", "pid", "state"),
        values={"state": CHECKPOINT_STATES},
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_process_checkpoint_query_errors_total",
        Kind.COUNTER,
        "CUDA checkpoint state queries that failed, by reason (not_permitted, ...).",
        ("reason",),
        otel_unit="{error}",
        max_series=budget.SMALL,
    ),
)


def stampable(spec: MetricSpec) -> bool:
    """Whether workload labels may be stamped onto this family (opt-in; /metrics and OTLP).

    Device series only: identity labels first, not an info family, not per
    process (those join on pid), and no label of the same name already.
    """
    return (
        spec.labels[: len(ID)] == ID
        and spec.kind is not Kind.INFO
        and "pid" not in spec.labels
        and not set(WORKLOAD_LABELS) & set(spec.labels)
    )


def stamped(spec: MetricSpec, labels: tuple[str, ...]) -> MetricSpec:
    """The row with ``labels`` (a subset of WORKLOAD_LABELS) appended."""
    if not stampable(spec) or not set(labels) <= set(WORKLOAD_LABELS):
        raise ValueError(f"{spec.name} cannot carry {labels}")
    return dataclasses.replace(spec, labels=(*spec.labels, *labels))


def pod_label_name(key: str) -> str:
    """The Prometheus label a Kubernetes label key is exported as.

    ``app.kubernetes.io/name`` -> ``label_app_kubernetes_io_name``, as
    kube-state-metrics writes it, except that names are lower case (the
    catalog's label rule), so ``App`` is ``label_app``.
    """
    return POD_LABEL_PREFIX + _NOT_LABEL_CHAR.sub("_", key.lower())


def pod_labels_row(keys: Sequence[str]) -> MetricSpec:
    """accel_pod_labels_info with one ``label_<key>`` label per configured key, in order."""
    base = next(row for row in ROWS if row.name == "accel_pod_labels_info")
    return dataclasses.replace(base, labels=(*base.labels, *(pod_label_name(k) for k in keys)))
