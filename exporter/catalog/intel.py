"""Intel GPU families (Level Zero Sysman): quantities the shared names do not cover.

Shared quantities (utilization, memory, temperatures, power, energy, clocks,
PCIe, throttle reasons) use the names in ``device.py``. Every series here
carries the identity labels ``device`` and ``uuid`` plus at most one bounded
dimension label.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec

# Rows a device worker may send (exporter.backend_api.wire): this module is a backend's.
FROM_WORKERS = True

ROWS = (
    MetricSpec(
        "accel_intel_engine_utilization_ratio",
        Kind.GAUGE,
        "Busy share of an engine group (compute, render, media, copy, ...) over the last poll,"
        " from Sysman activity counters; the mean of the tiles on multi-tile GPUs, 0..1.",
        (*ID, "engine"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_intel_memory_read_bytes_total",
        Kind.COUNTER,
        "Bytes read from device memory (Sysman bandwidth counter, summed over modules).",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_intel_memory_write_bytes_total",
        Kind.COUNTER,
        "Bytes written to device memory (Sysman bandwidth counter, summed over modules).",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_intel_memory_health",
        Kind.GAUGE,
        "Worst memory module health: 1 ok, 2 degraded, 3 critical, 4 replace (0 unknown).",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_intel_reset_required",
        Kind.GAUGE,
        "1 when Sysman says the device needs a reset (wedged or needing repair), else 0.",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_intel_reset_reason_info",
        Kind.INFO,
        "Why Sysman says the device needs a reset (zes_reset_reason_flag_t): wedged (hardware"
        " wedged) or repair (a reset completes in-field repairs); one series per reason set.",
        (*ID, "reason"),
        values={"reason": ("wedged", "repair")},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_intel_ras_correctable_errors_total",
        Kind.COUNTER,
        "Correctable RAS errors by category (reset, programming, driver, compute, non_compute,"
        " cache, display), summed over the device's error sets.",
        (*ID, "category"),
        otel_unit="{error}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_intel_ras_uncorrectable_errors_total",
        Kind.COUNTER,
        "Uncorrectable RAS errors by category (reset, programming, driver, compute, non_compute,"
        " cache, display), summed over the device's error sets.",
        (*ID, "category"),
        otel_unit="{error}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_intel_fabric_port_up",
        Kind.GAUGE,
        "1 when the XeLink fabric port is healthy or degraded, 0 when failed, disabled or"
        " unknown; port is fabricId.attachId.portNumber.",
        (*ID, "port"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_intel_fabric_rx_bytes_total",
        Kind.COUNTER,
        "Bytes received on the XeLink fabric port (protocol overhead included).",
        (*ID, "port"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_intel_fabric_tx_bytes_total",
        Kind.COUNTER,
        "Bytes transmitted on the XeLink fabric port (protocol overhead included).",
        (*ID, "port"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_intel_reading_denied_info",
        Kind.INFO,
        "A reading the driver refused for lack of privileges (INSUFFICIENT_PERMISSIONS: the xe"
        " driver serves engines and temperatures to root only); its families are absent.",
        (*ID, "reading"),
        max_series=budget.DEVICE_PARTS,
    ),
)
