"""NVIDIA-only device families (XID, NVLink, MIG, retired pages, remapped rows, ...).

Shared device families (utilization, memory, power, clocks, ECC, ...) are in
``device.py``. Series carry the identity labels ``device`` and ``uuid`` plus
one bounded dimension; MIG series add ``gpu_instance`` (memory and utilization
belong to the GPU instance, shared by its compute instances) and, for the MIG
devices themselves, ``compute_instance``.
"""

from __future__ import annotations

from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec

GPU_INSTANCE = (*ID, "gpu_instance")
MIG = (*GPU_INSTANCE, "compute_instance")

# XIDs that mean the GPU needs a reset, the node a reboot, or the hardware service
# (NVIDIA's Xid catalog, resolution RESET_GPU / RESTART_BM / CONTACT_SUPPORT):
# 48 double-bit ECC error, 61/62 internal micro-controller breakpoint/halt, 64 row-remap
# or page-retirement failure, 74 NVLink error, 79 fallen off the bus, 95 uncontained
# ECC error, 119/120 GSP RPC timeout/error, 140 unrecovered ECC error, 143 GPU
# initialisation failure, 154 recovery action changed. Application faults (13, 31, 43,
# 45), recorded or contained events (63, 94) and a high single-bit rate (92) are not:
# the GPU keeps working. One list for ``check xid`` and the alerts: AccelCriticalXid
# pages on these but 79, which AccelGpuFallenOffBus covers (a test keeps
# deploy/prometheus/alerts.yaml equal to this list).
CRITICAL_XIDS = frozenset({48, 61, 62, 64, 74, 79, 95, 119, 120, 140, 143, 154})

ROWS = (
    MetricSpec(
        "accel_xid_errors_total",
        Kind.COUNTER,
        "XID errors reported by the NVIDIA driver through NVML events, by XID code"
        " (counted since the worker started).",
        (*ID, "xid"),
    ),
    MetricSpec(
        "accel_xid_last_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the last XID error with this code (alert on changes of this).",
        (*ID, "xid"),
        unit="seconds",
    ),
    MetricSpec(
        "accel_remapped_rows",
        Kind.GAUGE,
        "Memory rows remapped after correctable or uncorrectable errors (Ampere and later).",
        (*ID, "type"),
    ),
    MetricSpec(
        "accel_remapped_rows_pending",
        Kind.GAUGE,
        "1 when a row remapping waits for a GPU reset.",
        ID,
    ),
    MetricSpec(
        "accel_remapped_rows_failure",
        Kind.GAUGE,
        "1 when a row remapping failed (the GPU should be serviced).",
        ID,
    ),
    MetricSpec(
        "accel_nvlink_up",
        Kind.GAUGE,
        "1 when the NVLink link is active, 0 when it is down.",
        (*ID, "link"),
    ),
    MetricSpec(
        "accel_nvlink_tx_bytes_total",
        Kind.COUNTER,
        "Data bytes transmitted over one NVLink link (payload, without protocol overhead).",
        (*ID, "link"),
        unit="bytes",
    ),
    MetricSpec(
        "accel_nvlink_rx_bytes_total",
        Kind.COUNTER,
        "Data bytes received over one NVLink link (payload, without protocol overhead).",
        (*ID, "link"),
        unit="bytes",
    ),
    MetricSpec(
        "accel_mig_device_info",
        Kind.INFO,
        "A MIG device (GPU instance and compute instance) of the GPU uuid; always 1.",
        (*MIG, "mig_uuid"),
    ),
    MetricSpec(
        "accel_mig_memory_total_bytes",
        Kind.GAUGE,
        "Device memory of a MIG GPU instance (its compute instances share it).",
        GPU_INSTANCE,
        unit="bytes",
    ),
    MetricSpec(
        "accel_mig_memory_used_bytes",
        Kind.GAUGE,
        "Device memory in use in a MIG GPU instance.",
        GPU_INSTANCE,
        unit="bytes",
    ),
    MetricSpec(
        "accel_mig_memory_free_bytes",
        Kind.GAUGE,
        "Device memory free in a MIG GPU instance.",
        GPU_INSTANCE,
        unit="bytes",
    ),
    MetricSpec(
        "accel_mig_utilization_ratio",
        Kind.GAUGE,
        "Share of time a MIG GPU instance ran work between two polls (GPM graphics"
        " activity), 0..1.",
        GPU_INSTANCE,
        unit="ratio",
    ),
    MetricSpec(
        "accel_mig_memory_bandwidth_utilization_ratio",
        Kind.GAUGE,
        "DRAM bandwidth used by a MIG GPU instance between two polls (GPM), 0..1.",
        GPU_INSTANCE,
        unit="ratio",
    ),
    MetricSpec(
        "accel_process_sm_utilization_ratio",
        Kind.GAUGE,
        "SM utilization of one process over the driver's latest sample"
        " (only with processes: true).",
        (*ID, "pid"),
        unit="ratio",
    ),
    MetricSpec(
        "accel_nvml_field_errors_total",
        Kind.COUNTER,
        "NVML calls for a device that failed with an error other than not-supported, by reason"
        " (the field is omitted; counted since the worker started).",
        (*ID, "reason"),
    ),
)
