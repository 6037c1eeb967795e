"""AMD-only device families (amdsmi): quantities NVIDIA has no counterpart for.

Shared quantities (utilization, VRAM, temperatures, power, energy, clocks, ECC
totals, PCIe link, throttling, events, processes) use the names in
``device.py``. Every series here carries the identity labels ``device`` and
``uuid`` plus bounded dimension labels.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import (
    AFID_CLASSIFIED,
    AFID_SEVERITIES,
    AFID_TABLE_SEVERITIES,
    AMD_SENSORS,
    BAD_PAGE_STATUSES,
    POWER_BOUNDS,
    RESIDENCIES,
    TEMPERATURE_LIMITS,
)

# Rows a device worker may send (exporter.backend_api.wire): this module is a backend's.
FROM_WORKERS = True

ROWS = (
    MetricSpec(
        "accel_amd_board_info",
        Kind.INFO,
        "The board part number amdsmi gives (board_info model_number, e.g. 102-G30211-00);"
        " always 1. AMD's exporter names the model by it (card_model).",
        (*ID, "part_number"),
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_mm_activity_ratio",
        Kind.GAUGE,
        "Multimedia engine busy share from amdsmi gpu activity (mm_activity), 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_vcn_activity_ratio",
        Kind.GAUGE,
        "Video codec (VCN) instance busy share from gpu_metrics, 0..1.",
        (*ID, "engine"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_jpeg_activity_ratio",
        Kind.GAUGE,
        "JPEG decoder instance busy share from gpu_metrics, 0..1.",
        (*ID, "engine"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_gtt_total_bytes",
        Kind.GAUGE,
        "GTT (system memory mapped for the GPU) size.",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_gtt_used_bytes",
        Kind.GAUGE,
        "GTT (system memory mapped for the GPU) in use.",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_visible_vram_total_bytes",
        Kind.GAUGE,
        "CPU-visible VRAM (the BAR window) size.",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_visible_vram_used_bytes",
        Kind.GAUGE,
        "CPU-visible VRAM (the BAR window) in use.",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_ecc_correctable_errors_total",
        Kind.COUNTER,
        "Correctable ECC errors of one RAS block (umc, sdma, gfx, xgmi_wafl, ...).",
        (*ID, "block"),
        otel_unit="{error}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_ecc_uncorrectable_errors_total",
        Kind.COUNTER,
        "Uncorrectable ECC errors of one RAS block (umc, sdma, gfx, xgmi_wafl, ...).",
        (*ID, "block"),
        otel_unit="{error}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_ecc_deferred_errors_total",
        Kind.COUNTER,
        "Deferred ECC errors of one RAS block (umc, sdma, gfx, xgmi_wafl, ...).",
        (*ID, "block"),
        otel_unit="{error}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_xgmi_read_bytes_total",
        Kind.COUNTER,
        "Data read over one XGMI link since the driver loaded (gpu_metrics, KB x 1024).",
        (*ID, "link"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_xgmi_write_bytes_total",
        Kind.COUNTER,
        "Data written over one XGMI link since the driver loaded (gpu_metrics, KB x 1024).",
        (*ID, "link"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_xgmi_link_up",
        Kind.GAUGE,
        "1 when the XGMI link is up, 0 when it is down (gpu_metrics xgmi_link_status).",
        (*ID, "link"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_violation_residency_total",
        Kind.COUNTER,
        "Firmware samples spent throttled for the reason (prochot, ppt, socket_thermal, "
        "vr_thermal, hbm_thermal with xcp empty: the whole GPU; gfx_below_host_limit_ppt, "
        "_thermal, _total and gfx_low_utilization per XCP, the mean of its XCCs); divide its "
        "rate by accel_amd_violation_samples_total's.",
        (*ID, "reason", "xcp"),
        otel_unit="{sample}",
        values={"reason": RESIDENCIES},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_xcp_utilization_ratio",
        Kind.GAUGE,
        "Instantaneous GFX busy share of one XCP (compute partition), the mean of its XCCs"
        " (gpu_metrics xcp_stats gfx_busy_inst); a partition exports its own XCP only.",
        (*ID, "xcp"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_afid_errors_total",
        Kind.COUNTER,
        "CPER error records naming this AMD field-replaceable-unit diagnosis (AFID), by"
        " record severity (fatal, non_fatal_uncorrected, non_fatal_corrected).",
        (*ID, "afid", "severity"),
        otel_unit="{error}",
        values={"severity": AFID_SEVERITIES},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_afid_info",
        Kind.INFO,
        "What an AFID counted on this device is, by AMD's table (docs/amd.md): its category"
        " and type as AMD's decoder names them, the severity the table gives it (which wins"
        " over the CPER record's) and whether the decoder classified the event (false for"
        " 31-34 and 16999: it could not; unknown: no table here names the AFID); always 1.",
        (*ID, "afid", "category", "type", "severity", "classified"),
        values={"severity": AFID_TABLE_SEVERITIES, "classified": AFID_CLASSIFIED},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_corrected_afids_decoded",
        Kind.GAUGE,
        "1 when the amdsmi library decodes the AFIDs of corrected CPER records (26.5.0 and"
        " later); 0 when it does not: this device's corrected-AFID counts (13, 15, 17, 24,"
        " 29) are then unknown, not zero, and its corrected records are counted as skipped"
        " (corrected_afids_not_decoded).",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_afid_last_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the newest CPER record naming this AFID.",
        (*ID, "afid"),
        unit="seconds",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_cper_records_skipped_total",
        Kind.COUNTER,
        "CPER records read but not counted, by reason (bad_length, bad_signature, bad_header,"
        " afid_<amdsmi status> when AFID decoding failed, e.g. on an unknown section,"
        " corrected_afids_not_decoded for corrected records on amdsmi before 26.5.0).",
        (*ID, "reason"),
        otel_unit="{record}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_amd_bad_pages",
        Kind.GAUGE,
        "Bad VRAM pages not (yet) retired, by status: pending (retired at the next reset) or"
        " unreservable (could not be retired).",
        (*ID, "status"),
        otel_unit="{page}",
        values={"status": BAD_PAGE_STATUSES},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_bad_page_threshold",
        Kind.GAUGE,
        "Retired pages beyond which the driver declares the GPU bad (amdgpu bad_page_threshold).",
        ID,
        otel_unit="{page}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_power_cap_watts",
        Kind.GAUGE,
        "Power cap bounds: min and max settable, and the default.",
        (*ID, "bound"),
        unit="watts",
        values={"bound": POWER_BOUNDS},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_temperature_limit_celsius",
        Kind.GAUGE,
        "Temperature limit of a sensor: max (throttling), critical, emergency.",
        (*ID, "sensor", "limit"),
        unit="celsius",
        values={"sensor": AMD_SENSORS, "limit": TEMPERATURE_LIMITS},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_pcie_replay_rollovers_total",
        Kind.COUNTER,
        "Times the PCIe replay counter rolled over (replay number exhausted).",
        ID,
        otel_unit="{rollover}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_pcie_other_end_recoveries_total",
        Kind.COUNTER,
        "PCIe link recoveries initiated by the other end of the link.",
        ID,
        otel_unit="{recovery}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_violation_samples_total",
        Kind.COUNTER,
        "Firmware throttle-accounting samples taken (gpu_metrics accumulation_counter).",
        ID,
        otel_unit="{sample}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_partition_id",
        Kind.GAUGE,
        "Index of this logical device within its physical GPU (0 unless partitioned).",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_pcie_bandwidth_bytes_per_second",
        Kind.GAUGE,
        "Instantaneous PCIe bandwidth, both directions together.",
        ID,
        unit="bytes_per_second",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_pcie_recoveries_total",
        Kind.COUNTER,
        "PCIe link transitions from L0 to recovery.",
        ID,
        otel_unit="{recovery}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_pcie_nak_sent_total",
        Kind.COUNTER,
        "PCIe NAKs sent by the device.",
        ID,
        otel_unit="{nak}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_pcie_nak_received_total",
        Kind.COUNTER,
        "PCIe NAKs received by the device.",
        ID,
        otel_unit="{nak}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_amd_process_compute_units",
        Kind.GAUGE,
        "Compute units occupied by one process (only with processes: true).",
        (*ID, "pid"),
        otel_unit="{compute_unit}",
        max_series=budget.PROCESSES,
    ),
)
