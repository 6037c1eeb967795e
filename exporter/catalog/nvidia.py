"""NVIDIA-only device families (XID, NVLink, MIG, retired pages, remapped rows, ...).

Shared device families (utilization, memory, power, clocks, ECC, ...) are in
``device.py``. Series carry the identity labels ``device`` and ``uuid`` plus
one bounded dimension; MIG series add ``gpu_instance`` (memory and utilization
belong to the GPU instance, shared by its compute instances) and, for the MIG
devices themselves, ``compute_instance``.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import ECC_CORRECTION, FABRIC_STATES, NVLINK_ERRORS, POWER_BOUNDS

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

# Rows a device worker may send (exporter.backend_api.wire): this module is a backend's.
FROM_WORKERS = True

ROWS = (
    MetricSpec(
        "accel_xid_errors_total",
        Kind.COUNTER,
        "XID errors reported by the NVIDIA driver through NVML events, by XID code"
        " (counted since the worker started).",
        (*ID, "xid"),
        otel_unit="{error}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_xid_last_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the last XID error with this code (alert on changes of this).",
        (*ID, "xid"),
        unit="seconds",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_remapped_rows",
        Kind.GAUGE,
        "Memory rows remapped after correctable or uncorrectable errors (Ampere and later).",
        (*ID, "type"),
        otel_unit="{row}",
        values={"type": ECC_CORRECTION},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_remapped_rows_pending",
        Kind.GAUGE,
        "1 when a row remapping waits for a GPU reset.",
        ID,
        otel_unit="{row}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_remapped_rows_failure",
        Kind.GAUGE,
        "1 when a row remapping failed (the GPU should be serviced).",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_nvlink_up",
        Kind.GAUGE,
        "1 when the NVLink link is active, 0 when it is down.",
        (*ID, "link"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_nvlink_tx_bytes_total",
        Kind.COUNTER,
        "Data bytes transmitted over one NVLink link (payload, without protocol overhead).",
        (*ID, "link"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_nvlink_rx_bytes_total",
        Kind.COUNTER,
        "Data bytes received over one NVLink link (payload, without protocol overhead).",
        (*ID, "link"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_mig_device_info",
        Kind.INFO,
        "A MIG device (GPU instance and compute instance) of the GPU uuid, with its GPU instance"
        " profile (1g.10gb; empty when the driver names none); always 1.",
        (*MIG, "mig_uuid", "profile"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_mig_memory_total_bytes",
        Kind.GAUGE,
        "Device memory of a MIG GPU instance (its compute instances share it).",
        GPU_INSTANCE,
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_mig_memory_used_bytes",
        Kind.GAUGE,
        "Device memory in use in a MIG GPU instance.",
        GPU_INSTANCE,
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_mig_memory_free_bytes",
        Kind.GAUGE,
        "Device memory free in a MIG GPU instance.",
        GPU_INSTANCE,
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_mig_utilization_ratio",
        Kind.GAUGE,
        "Share of time a MIG GPU instance ran work between two polls (GPM graphics"
        " activity), 0..1.",
        GPU_INSTANCE,
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_mig_memory_bandwidth_utilization_ratio",
        Kind.GAUGE,
        "DRAM bandwidth used by a MIG GPU instance between two polls (GPM), 0..1.",
        GPU_INSTANCE,
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_process_sm_utilization_ratio",
        Kind.GAUGE,
        "SM utilization of one process over the driver's latest sample"
        " (only with processes: true).",
        (*ID, "pid"),
        unit="ratio",
        max_series=budget.PROCESSES,
    ),
    # Profiling-grade activity from NVML GPM (Hopper and later), averaged between two
    # fast polls: what DCGM's DCP fields give, without DCGM or SYS_ADMIN.
    MetricSpec(
        "accel_graphics_engine_active_ratio",
        Kind.GAUGE,
        "Share of time the graphics or compute engine was active between two polls"
        " (GPM GRAPHICS_UTIL, DCGM PROF_GR_ENGINE_ACTIVE), 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_sm_active_ratio",
        Kind.GAUGE,
        "Share of SMs that were busy, averaged between two polls"
        " (GPM SM_UTIL, DCGM PROF_SM_ACTIVE), 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_sm_occupancy_ratio",
        Kind.GAUGE,
        "Resident warps over the SMs' theoretical maximum, averaged between two polls"
        " (GPM SM_OCCUPANCY, DCGM PROF_SM_OCCUPANCY), 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_pipe_active_ratio",
        Kind.GAUGE,
        "Share of time the SMs kept a pipe busy between two polls, by pipe (tensor: any"
        " tensor operation; tensor_hmma/imma/dmma/dfma: by kind; fp64/fp32/fp16: non-tensor"
        " math; integer) (GPM, DCGM PROF_PIPE_*_ACTIVE), 0..1.",
        (*ID, "pipe"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_dram_active_ratio",
        Kind.GAUGE,
        "DRAM bandwidth used over the theoretical maximum between two polls"
        " (GPM DRAM_BW_UTIL, DCGM PROF_DRAM_ACTIVE), 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_engine_utilization_ratio",
        Kind.GAUGE,
        "Share of time one video or vision engine was busy between two polls, by engine"
        " (nvdec0.., nvjpg0.., nvenc0.., ofa0..) (GPM), 0..1.",
        (*ID, "engine"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_pcie_tx_average_bytes_per_second",
        Kind.GAUGE,
        "PCIe traffic sent by the device, averaged between two polls (GPM; DCGM"
        " PROF_PCIE_TX_BYTES).",
        ID,
        unit="bytes_per_second",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_pcie_rx_average_bytes_per_second",
        Kind.GAUGE,
        "PCIe traffic received by the device, averaged between two polls (GPM; DCGM"
        " PROF_PCIE_RX_BYTES).",
        ID,
        unit="bytes_per_second",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_nvlink_tx_average_bytes_per_second",
        Kind.GAUGE,
        "NVLink traffic written by the device over all links, averaged between two polls"
        " (GPM; DCGM PROF_NVLINK_TX_BYTES).",
        ID,
        unit="bytes_per_second",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_nvlink_rx_average_bytes_per_second",
        Kind.GAUGE,
        "NVLink traffic read by the device over all links, averaged between two polls"
        " (GPM; DCGM PROF_NVLINK_RX_BYTES).",
        ID,
        unit="bytes_per_second",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_device_recovery_action",
        Kind.GAUGE,
        "What the driver asks to make the GPU usable again (NVML field 230), one-hot over"
        " none, gpu_reset, node_reboot, drain_p2p, drain_and_reset.",
        (*ID, "action"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_nvlink_errors_total",
        Kind.COUNTER,
        "NVLink data-link errors of one link by type (crc_flit, crc_data, replay, recovery),"
        " as the driver counts them.",
        (*ID, "link", "type"),
        otel_unit="{error}",
        values={"type": NVLINK_ERRORS},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_nvidia_fabric_state",
        Kind.GAUGE,
        "GPU registration with the NVLink fabric manager (NVSwitch systems), one-hot over"
        " not_started, in_progress, completed; absent without a fabric.",
        (*ID, "state"),
        values={"state": FABRIC_STATES},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_nvidia_fabric_health_issue",
        Kind.GAUGE,
        "1 when the fabric health mask reports this problem (degraded_bandwidth,"
        " route_recovery, route_unhealthy, access_timeout_recovery, incorrect_configuration),"
        " 0 when it reports its absence; absent where the GPU does not report it.",
        (*ID, "check"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_sram_ecc_threshold_exceeded",
        Kind.GAUGE,
        "1 when the GPU's SRAM ECC errors passed the threshold at which NVIDIA advises"
        " replacing it (nvmlDeviceGetSramEccErrorStatus), else 0.",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_temperature_margin_celsius",
        Kind.GAUGE,
        "Degrees left before the GPU slows down for heat (NVML margin temperature, T.Limit);"
        " negative past the limit.",
        ID,
        unit="celsius",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_power_limit_bound_watts",
        Kind.GAUGE,
        "The power limit the management interface allows, by bound (min, max, default).",
        (*ID, "bound"),
        unit="watts",
        values={"bound": POWER_BOUNDS},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_process_memory_utilization_ratio",
        Kind.GAUGE,
        "Share of time one process read or wrote device memory in the last sample, 0..1.",
        (*ID, "pid"),
        unit="ratio",
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_process_encoder_utilization_ratio",
        Kind.GAUGE,
        "Share of time one process kept the video encoder busy in the last sample, 0..1.",
        (*ID, "pid"),
        unit="ratio",
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_process_decoder_utilization_ratio",
        Kind.GAUGE,
        "Share of time one process kept the video decoder busy in the last sample, 0..1.",
        (*ID, "pid"),
        unit="ratio",
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_process_info",
        Kind.INFO,
        "The name the driver gives a process using the GPU (its executable), by pid.",
        (*ID, "pid", "name"),
        max_series=budget.PROCESSES,
    ),
)
