"""Workload attribution (Kubernetes, Slurm) and CUDA checkpoint families.

Attribution is exported as join metrics (``*_info`` of value 1) rather than as
labels on every device series, so a busy node's pod churn does not multiply the
device series; PromQL joins them on ``uuid`` (and ``pid``).
"""

from __future__ import annotations

import dataclasses

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
    ),
    MetricSpec(
        "accel_mig_workload_info",
        Kind.INFO,
        "A Kubernetes container the kubelet assigned this MIG device to; always 1."
        " Join on uuid and gpu_instance with the accel_mig_* series.",
        (*ID, "gpu_instance", "compute_instance", *WORKLOAD_LABELS),
    ),
    MetricSpec(
        "accel_process_workload_info",
        Kind.INFO,
        "The workload a process on a device belongs to (pod from its cgroup, Slurm job from its"
        " cgroup or environment); labels not known are empty; always 1.",
        PROCESS_WORKLOAD_LABELS,
    ),
    MetricSpec(
        "accel_device_job_info",
        Kind.INFO,
        "A Slurm job running on this device; always 1. Join on uuid.",
        (*ID, "job_id", "user", "partition"),
    ),
    MetricSpec(
        "accel_workload_attribution_errors_total",
        Kind.COUNTER,
        "Attribution lookups that failed, by reason; the affected labels are left out.",
        ("reason",),
    ),
    MetricSpec(
        "accel_process_checkpoint_state",
        Kind.GAUGE,
        "CUDA checkpoint state of a GPU process, one-hot: 1 for the current state, else 0.",
        ("uuid", "pid", "state"),
    ),
    MetricSpec(
        "accel_process_checkpoint_query_errors_total",
        Kind.COUNTER,
        "CUDA checkpoint state queries that failed, by reason (not_permitted, ...).",
        ("reason",),
    ),
)


def stampable(spec: MetricSpec) -> bool:
    """Whether workload labels may be stamped onto this family (opt-in, Prometheus only).

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
