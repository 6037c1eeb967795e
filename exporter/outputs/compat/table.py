"""The migration table: every field of both originals' default lists, served or not, and why.

docs/migrating.md's table is generated from here (scripts/gen_docs.py), and the
compat tests skip exactly the dashboard queries of the metrics listed here as
not served: one list for the documentation and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog import CATALOG
from exporter.outputs.compat import amd, dcgm
from exporter.outputs.compat.dcgm_table import LEGACY_UNITS


@dataclass(frozen=True)
class Row:
    """One field of an original exporter's default list."""

    exporter: str  # "dcgm-exporter 4.x" or "device-metrics-exporter 1.5"
    field: str  # the original's field name
    served: str  # the series name we serve ("" when not served)
    unit: str
    source: str  # our family (or families) the value comes from
    note: str = ""  # why not served, or how it differs


DCGM = "dcgm-exporter"
AMD = "device-metrics-exporter"
DCGM_LABELS = (
    "`gpu`, `UUID`, `pci_bus_id`, `device` (`nvidia<i>`), `modelName`, `Hostname`,"
    " `DCGM_FI_DRIVER_VERSION`; `GPU_I_PROFILE`, `GPU_I_ID` on MIG instances; `pod`,"
    " `namespace`, `container` when attributed; `hpc_job` for Slurm"
)
AMD_LABELS = (
    "`gpu_id`, `gpu_uuid`, `serial_number`, `card_model` (board part number), `card_series`,"
    " `card_vendor`, `vbios_version`, `driver_version`, `gpu_partition_id`,"
    " `gpu_compute_partition_type`, `gpu_memory_partition_type`, `hostname`, `cluster_name`,"
    " `pod`, `namespace`, `container`, `job_id`, `job_user`, `job_partition`; each only when"
    ' its value is not empty (Prometheus stores `pod=""` as no label), and a series that'
    " would carry more than 15 leaves out `job_partition`, `job_user`, the partition types,"
    " then `vbios_version`, `card_vendor`, `driver_version`, `card_series`, `serial_number`,"
    " in that order, as many as it must"
)

_DCGM_UNITS = LEGACY_UNITS
_DCGM_NOTES = {
    "DCGM_FI_DEV_MEMORY_TEMP": "absent where the GPU has no memory sensor (as in DCGM)",
    "DCGM_FI_DEV_XID_ERRORS": "the XID of the newest error since the worker started (0, "
    '`err_msg="No Error"` before any); labels `err_code`, `err_msg` as dcgm-exporter writes them',
    "DCGM_FI_DEV_FB_FREE": "per GPU instance on MIG",
    "DCGM_FI_DEV_FB_USED": "per GPU instance on MIG",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "NVML GPM (Hopper and later), per GPU instance on MIG",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "NVML GPM any-tensor pipe (Hopper and later)",
    "DCGM_FI_PROF_DRAM_ACTIVE": "NVML GPM (Hopper and later), per GPU instance on MIG",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "NVML GPM (Hopper and later)",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "NVML GPM (Hopper and later)",
}
_DCGM_NOT_SERVED = (
    Row(
        DCGM, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "", "", "accel_nvlink_{tx,rx}_bytes_total",
        "DCGM sums header and payload counters of every lane in a unit it does not document"
        " for this field; we read payload bytes per link and do not serve a number in a"
        " guessed unit",
    ),
    Row(
        DCGM, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "", "", "",
        "vGPU guests only; we do not read the vGPU license state",
    ),
)  # fmt: skip


def _source(family: str, dims: tuple[str, ...]) -> str:
    """Our family with the dimension values a field selects (``accel_clock_hertz{clock="sm"}``)."""
    names = CATALOG[family].labels[2 : 2 + len(dims)]
    chosen = ",".join(f'{n}="{v}"' for n, v in zip(names, dims, strict=True) if v)
    return f"{family}{{{chosen}}}" if chosen else family


def _dcgm_rows() -> list[Row]:
    rows = [
        Row(DCGM, f.name, f.name, _DCGM_UNITS.get(f.name, "count"), _source(f.source, f.dims),
            _DCGM_NOTES.get(f.name, ""))
        for f in dcgm.ORDER
    ]  # fmt: skip
    rows += _DCGM_NOT_SERVED
    rows.append(
        Row(DCGM, "DCGM_FI_DRIVER_VERSION", "(label)", "", "accel_device_info driver_version",
            "a label on every series, as in dcgm-exporter")
    )  # fmt: skip
    return rows


_AMD_UNITS = {
    "power": "W",
    "temperature": "C",
    "activity": "%",
    "vram": "MB",
    "gtt": "MB",
    "energy": "uJ",
    "speed": "GT/s",
    "bandwidth": "Mb/s",
    "clock": "MHz",
    "busy": "%",
    "xgmi_link": "KB",
}


def _amd_unit(name: str) -> str:
    for key, unit in _AMD_UNITS.items():
        if key in name:
            return unit
    return "count"


_AMD_NOTES = {
    "gpu_gfx_busy_instantaneous": "per XCP, the mean of its XCCs, under `xcc_index` = the XCP"
    " (one series per XCC in CPX, where an XCP has one XCC; one for the whole GPU in SPX)",
    "gpu_health": "1 while our verdict is ok (docs/health.md), 0 in another state; no"
    " series while the exporter cannot vouch for the device (its verdict unknown)",
    "gpu_nodes_total": "labels `hostname`, `cluster_name` (AMD writes the others empty)",
    "gpu_hbm_temperature": "per sensor, `hbm_index`; where the driver still reports them",
    "gpu_edge_temperature": "where the card has the sensor (MI2xx)",
    "gpu_clock": "`clock_type` system (gfx), memory, data (fabric), soc, video (vclk, dclk);"
    " `clock_index` in order",
    "gpu_max_clock": "`clock_type`, `clock_index` as gpu_clock",
}
# Fields we do not serve: a reason per group of names.
_AMD_REASONS = (
    (("GPU_AVERAGE_PACKAGE_POWER",),
     "MI2xx only in AMD's exporter; amdsmi gives one socket power, served as"
     " gpu_package_power and gpu_power_usage"),
    (("GPU_MMA_ACTIVITY", "GPU_VCN_ACTIVITY", "GPU_JPEG_ACTIVITY", "GPU_VOLTAGE",
      "GPU_GFX_VOLTAGE", "GPU_MEMORY_VOLTAGE"),
     "deprecated: AMD's exporter serves it on no platform"),
    (("PCIE_RX", "PCIE_TX"), "not implemented in AMD's exporter either (\"upcoming\")"),
    (("PCIE_BIDIRECTIONAL_BANDWIDTH", "GPU_VRAM_MAX_BANDWIDTH", "GPU_MIN_CLOCK"),
     "not read: amdsmi's accumulated PCIe bandwidth, the memory bandwidth ceiling and the"
     " minimum clocks are not among our readings"),
    (("GPU_VCN_BUSY_INSTANTANEOUS", "GPU_JPEG_BUSY_INSTANTANEOUS"),
     "not read per XCP; we read the whole GPU's VCN and JPEG activity"
     " (accel_amd_vcn_activity_ratio, accel_amd_jpeg_activity_ratio)"),
    (("GPU_VIOLATION_PROCESSOR_HOT_RESIDENCY_PERCENTAGE", "GPU_VIOLATION_PPT_RESIDENCY_PERCENTAGE",
      "GPU_VIOLATION_SOCKET_THERMAL_RESIDENCY_PERCENTAGE",
      "GPU_VIOLATION_VR_THERMAL_RESIDENCY_PERCENTAGE",
      "GPU_VIOLATION_HBM_THERMAL_RESIDENCY_PERCENTAGE",
      "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_POWER_PERCENTAGE",
      "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_THERMAL_PERCENTAGE",
      "GPU_VIOLATION_LOW_UTILIZATION_PERCENTAGE",
      "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_TOTAL_PERCENTAGE"),
     "a ratio AMD's exporter computes between two of its own polls; a pure render cannot:"
     " 100 * rate(the _accumulated residency) / rate(gpu_violation_current_accumulated_counter)"),
    (("GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_POWER_ACCUMULATED",
      "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_THERMAL_ACCUMULATED",
      "GPU_VIOLATION_LOW_UTILIZATION_ACCUMULATED",
      "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_TOTAL_ACCUMULATED"),
     "AMD serves one per XCC; we keep the mean over each XCP's XCCs"
     " (accel_amd_violation_residency_total{xcp})"),
    (("GPU_AFID_ERRORS",),
     "AMD serves the last event's AFID as a value; we count CPER records per AFID and severity"
     " (accel_amd_afid_errors_total)"),
    (("GPU_PROCESS_CU_OCCUPANCY",),
     "per process (KFD pid label); we serve compute units per process with processes: true"
     " (accel_amd_process_compute_units)"),
    (tuple(f"GPU_XGMI_NBR_{n}_{k}" for n in (0, 1) for k in ("NOP_TX", "REQ_TX", "RESP_TX",
                                                               "BEATS_TX"))
     + tuple(f"GPU_XGMI_NBR_{n}_TX_THRPUT" for n in range(6)),
     "XGMI neighbour performance counters, read by AMD's gpuagent; amdsmi's per-link data"
     " volumes are served as gpu_xgmi_link_rx/tx"),
)  # fmt: skip
_PROF_REASON = (
    "rocprofiler counters: off by default in AMD's exporter too (ProfilerMetrics), and a"
    " profiler session conflicts with application profiling; we do not run one"
)


def _amd_rows() -> list[Row]:
    served = {f.name: (_source(f.source, f.dims), "") for f in amd.FIELDS}
    served.update(
        {
            "gpu_nodes_total": ('accel_devices{vendor="amd"}', ""),
            "gpu_health": ('accel_device_health{state="ok"}', ""),
            "gpu_free_visible_vram": ("accel_amd_visible_vram_{total,used}_bytes", ""),
            "gpu_free_gtt": ("accel_amd_gtt_{total,used}_bytes", ""),
            "gpu_hbm_temperature": ('accel_temperature_celsius{sensor="hbm_<i>"}', ""),
            "gpu_gfx_busy_instantaneous": ("accel_amd_xcp_utilization_ratio", ""),
            "gpu_clock": ("accel_clock_hertz", ""),
            "gpu_max_clock": ("accel_clock_max_hertz", ""),
            "gpu_xgmi_link_rx": ("accel_amd_xgmi_read_bytes_total", ""),
            "gpu_xgmi_link_tx": ("accel_amd_xgmi_write_bytes_total", ""),
        }
    )
    for kind, source, _ in amd.ECC_KINDS:
        for block in amd.BLOCKS.values():
            served[f"gpu_ecc_{kind}_{block}"] = (f"{source}{{block}}", "")
    reasons = {name: why for names, why in _AMD_REASONS for name in names}
    rows = []
    for field in AMD_FIELDS:
        name = field.lower()
        if name in served:
            source = served[name][0]
            rows.append(Row(AMD, field, name, _amd_unit(name), source, _AMD_NOTES.get(name, "")))
        elif field.startswith("GPU_PROF_"):
            rows.append(Row(AMD, field, "", "", "", _PROF_REASON))
        else:
            rows.append(Row(AMD, field, "", "", "", reasons[field]))
    return rows


# enum GPUMetricField of device-metrics-exporter v1.5.1 (pkg/exporter/proto/exporterconfig.proto):
# its default list is every field but GPU_PROF_* (tests/fixtures/compat keeps the original).
AMD_FIELDS = (
    "GPU_NODES_TOTAL",
    "GPU_PACKAGE_POWER",
    "GPU_AVERAGE_PACKAGE_POWER",
    "GPU_EDGE_TEMPERATURE",
    "GPU_JUNCTION_TEMPERATURE",
    "GPU_MEMORY_TEMPERATURE",
    "GPU_HBM_TEMPERATURE",
    "GPU_GFX_ACTIVITY",
    "GPU_UMC_ACTIVITY",
    "GPU_MMA_ACTIVITY",
    "GPU_VCN_ACTIVITY",
    "GPU_JPEG_ACTIVITY",
    "GPU_VOLTAGE",
    "GPU_GFX_VOLTAGE",
    "GPU_MEMORY_VOLTAGE",
    "PCIE_SPEED",
    "PCIE_MAX_SPEED",
    "PCIE_BANDWIDTH",
    "GPU_ENERGY_CONSUMED",
    "PCIE_REPLAY_COUNT",
    "PCIE_RECOVERY_COUNT",
    "PCIE_REPLAY_ROLLOVER_COUNT",
    "PCIE_NACK_SENT_COUNT",
    "PCIE_NACK_RECEIVED_COUNT",
    "GPU_CLOCK",
    "GPU_POWER_USAGE",
    "GPU_TOTAL_VRAM",
    "GPU_ECC_CORRECT_TOTAL",
    "GPU_ECC_UNCORRECT_TOTAL",
    "GPU_ECC_CORRECT_SDMA",
    "GPU_ECC_UNCORRECT_SDMA",
    "GPU_ECC_CORRECT_GFX",
    "GPU_ECC_UNCORRECT_GFX",
    "GPU_ECC_CORRECT_MMHUB",
    "GPU_ECC_UNCORRECT_MMHUB",
    "GPU_ECC_CORRECT_ATHUB",
    "GPU_ECC_UNCORRECT_ATHUB",
    "GPU_ECC_CORRECT_BIF",
    "GPU_ECC_UNCORRECT_BIF",
    "GPU_ECC_CORRECT_HDP",
    "GPU_ECC_UNCORRECT_HDP",
    "GPU_ECC_CORRECT_XGMI_WAFL",
    "GPU_ECC_UNCORRECT_XGMI_WAFL",
    "GPU_ECC_CORRECT_DF",
    "GPU_ECC_UNCORRECT_DF",
    "GPU_ECC_CORRECT_SMN",
    "GPU_ECC_UNCORRECT_SMN",
    "GPU_ECC_CORRECT_SEM",
    "GPU_ECC_UNCORRECT_SEM",
    "GPU_ECC_CORRECT_MP0",
    "GPU_ECC_UNCORRECT_MP0",
    "GPU_ECC_CORRECT_MP1",
    "GPU_ECC_UNCORRECT_MP1",
    "GPU_ECC_CORRECT_FUSE",
    "GPU_ECC_UNCORRECT_FUSE",
    "GPU_ECC_CORRECT_UMC",
    "GPU_ECC_UNCORRECT_UMC",
    "GPU_XGMI_NBR_0_NOP_TX",
    "GPU_XGMI_NBR_0_REQ_TX",
    "GPU_XGMI_NBR_0_RESP_TX",
    "GPU_XGMI_NBR_0_BEATS_TX",
    "GPU_XGMI_NBR_1_NOP_TX",
    "GPU_XGMI_NBR_1_REQ_TX",
    "GPU_XGMI_NBR_1_RESP_TX",
    "GPU_XGMI_NBR_1_BEATS_TX",
    "GPU_XGMI_NBR_0_TX_THRPUT",
    "GPU_XGMI_NBR_1_TX_THRPUT",
    "GPU_XGMI_NBR_2_TX_THRPUT",
    "GPU_XGMI_NBR_3_TX_THRPUT",
    "GPU_XGMI_NBR_4_TX_THRPUT",
    "GPU_XGMI_NBR_5_TX_THRPUT",
    "GPU_USED_VRAM",
    "GPU_FREE_VRAM",
    "GPU_TOTAL_VISIBLE_VRAM",
    "GPU_USED_VISIBLE_VRAM",
    "GPU_FREE_VISIBLE_VRAM",
    "GPU_TOTAL_GTT",
    "GPU_USED_GTT",
    "GPU_FREE_GTT",
    "GPU_ECC_CORRECT_MCA",
    "GPU_ECC_UNCORRECT_MCA",
    "GPU_ECC_CORRECT_VCN",
    "GPU_ECC_UNCORRECT_VCN",
    "GPU_ECC_CORRECT_JPEG",
    "GPU_ECC_UNCORRECT_JPEG",
    "GPU_ECC_CORRECT_IH",
    "GPU_ECC_UNCORRECT_IH",
    "GPU_ECC_CORRECT_MPIO",
    "GPU_ECC_UNCORRECT_MPIO",
    "GPU_HEALTH",
    "GPU_XGMI_LINK_RX",
    "GPU_XGMI_LINK_TX",
    "GPU_VIOLATION_CURRENT_ACCUMULATED_COUNTER",
    "GPU_VIOLATION_PROCESSOR_HOT_RESIDENCY_ACCUMULATED",
    "GPU_VIOLATION_PPT_RESIDENCY_ACCUMULATED",
    "GPU_VIOLATION_SOCKET_THERMAL_RESIDENCY_ACCUMULATED",
    "GPU_VIOLATION_VR_THERMAL_RESIDENCY_ACCUMULATED",
    "GPU_VIOLATION_HBM_THERMAL_RESIDENCY_ACCUMULATED",
    "GPU_GFX_BUSY_INSTANTANEOUS",
    "GPU_VCN_BUSY_INSTANTANEOUS",
    "GPU_JPEG_BUSY_INSTANTANEOUS",
    "PCIE_RX",
    "PCIE_TX",
    "PCIE_BIDIRECTIONAL_BANDWIDTH",
    "GPU_AFID_ERRORS",
    "GPU_VIOLATION_PROCESSOR_HOT_RESIDENCY_PERCENTAGE",
    "GPU_VIOLATION_PPT_RESIDENCY_PERCENTAGE",
    "GPU_VIOLATION_SOCKET_THERMAL_RESIDENCY_PERCENTAGE",
    "GPU_VIOLATION_VR_THERMAL_RESIDENCY_PERCENTAGE",
    "GPU_VIOLATION_HBM_THERMAL_RESIDENCY_PERCENTAGE",
    "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_POWER_ACCUMULATED",
    "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_THERMAL_ACCUMULATED",
    "GPU_VIOLATION_LOW_UTILIZATION_ACCUMULATED",
    "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_TOTAL_ACCUMULATED",
    "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_POWER_PERCENTAGE",
    "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_THERMAL_PERCENTAGE",
    "GPU_VIOLATION_LOW_UTILIZATION_PERCENTAGE",
    "GPU_VIOLATION_GFX_CLOCK_BELOW_HOST_LIMIT_TOTAL_PERCENTAGE",
    "GPU_MAX_CLOCK",
    "GPU_MIN_CLOCK",
    "GPU_PROCESS_CU_OCCUPANCY",
    "GPU_VRAM_MAX_BANDWIDTH",
    "GPU_ECC_DEFERRED_TOTAL",
    "GPU_ECC_DEFERRED_SDMA",
    "GPU_ECC_DEFERRED_GFX",
    "GPU_ECC_DEFERRED_MMHUB",
    "GPU_ECC_DEFERRED_ATHUB",
    "GPU_ECC_DEFERRED_BIF",
    "GPU_ECC_DEFERRED_HDP",
    "GPU_ECC_DEFERRED_XGMI_WAFL",
    "GPU_ECC_DEFERRED_DF",
    "GPU_ECC_DEFERRED_SMN",
    "GPU_ECC_DEFERRED_SEM",
    "GPU_ECC_DEFERRED_MP0",
    "GPU_ECC_DEFERRED_MP1",
    "GPU_ECC_DEFERRED_FUSE",
    "GPU_ECC_DEFERRED_UMC",
    "GPU_ECC_DEFERRED_MCA",
    "GPU_ECC_DEFERRED_VCN",
    "GPU_ECC_DEFERRED_JPEG",
    "GPU_ECC_DEFERRED_IH",
    "GPU_ECC_DEFERRED_MPIO",
    "GPU_PROF_GRBM_GUI_ACTIVE",
    "GPU_PROF_SQ_WAVES",
    "GPU_PROF_GRBM_COUNT",
    "GPU_PROF_CPC_CPC_STAT_BUSY",
    "GPU_PROF_CPC_CPC_STAT_IDLE",
    "GPU_PROF_CPC_CPC_STAT_STALL",
    "GPU_PROF_CPC_CPC_TCIU_BUSY",
    "GPU_PROF_CPC_CPC_TCIU_IDLE",
    "GPU_PROF_CPC_CPC_UTCL2IU_BUSY",
    "GPU_PROF_CPC_CPC_UTCL2IU_IDLE",
    "GPU_PROF_CPC_CPC_UTCL2IU_STALL",
    "GPU_PROF_CPC_ME1_BUSY_FOR_PACKET_DECODE",
    "GPU_PROF_CPC_ME1_DC0_SPI_BUSY",
    "GPU_PROF_CPC_UTCL1_STALL_ON_TRANSLATION",
    "GPU_PROF_CPC_ALWAYS_COUNT",
    "GPU_PROF_CPC_ADC_VALID_CHUNK_NOT_AVAIL",
    "GPU_PROF_CPC_ADC_DISPATCH_ALLOC_DONE",
    "GPU_PROF_CPC_ADC_VALID_CHUNK_END",
    "GPU_PROF_CPC_SYNC_FIFO_FULL_LEVEL",
    "GPU_PROF_CPC_SYNC_FIFO_FULL",
    "GPU_PROF_CPC_GD_BUSY",
    "GPU_PROF_CPC_TG_SEND",
    "GPU_PROF_CPC_WALK_NEXT_CHUNK",
    "GPU_PROF_CPC_STALLED_BY_SE0_SPI",
    "GPU_PROF_CPC_STALLED_BY_SE1_SPI",
    "GPU_PROF_CPC_STALLED_BY_SE2_SPI",
    "GPU_PROF_CPC_STALLED_BY_SE3_SPI",
    "GPU_PROF_CPC_LTE_ALL",
    "GPU_PROF_CPC_SYNC_WRREQ_FIFO_BUSY",
    "GPU_PROF_CPC_CANE_BUSY",
    "GPU_PROF_CPC_CANE_STALL",
    "GPU_PROF_CPF_CMP_UTCL1_STALL_ON_TRANSLATION",
    "GPU_PROF_CPF_CPF_STAT_BUSY",
    "GPU_PROF_CPF_CPF_STAT_IDLE",
    "GPU_PROF_CPF_CPF_STAT_STALL",
    "GPU_PROF_CPF_CPF_TCIU_BUSY",
    "GPU_PROF_CPF_CPF_TCIU_IDLE",
    "GPU_PROF_CPF_CPF_TCIU_STALL",
    "GPU_PROF_FETCH_SIZE",
    "GPU_PROF_WRITE_SIZE",
    "GPU_PROF_TOTAL_16_OPS",
    "GPU_PROF_TOTAL_32_OPS",
    "GPU_PROF_TOTAL_64_OPS",
    "GPU_PROF_GUI_UTIL_PERCENT",
    "GPU_PROF_OCCUPANCY_PERCENT",
    "GPU_PROF_TENSOR_ACTIVE_PERCENT",
    "GPU_PROF_VALU_PIPE_ISSUE_UTIL",
    "GPU_PROF_SM_ACTIVE",
    "GPU_PROF_OCCUPANCY_ELAPSED",
    "GPU_PROF_OCCUPANCY_PER_ACTIVE_CU",
    "GPU_PROF_OCCUPANCY_PER_CU",
    "GPU_PROF_SIMD_UTILIZATION",
)


def rows() -> list[Row]:
    """Every row, dcgm-exporter's first."""
    return [*_dcgm_rows(), *_amd_rows()]


NOT_SERVED_METRICS = frozenset(
    row.field if row.exporter == DCGM else row.field.lower() for row in rows() if not row.served
)
# Grafana variables of the AMD dashboards the original answers no better: label GPU_UUID is
# never written by device-metrics-exporter (its label is gpu_uuid).
NOT_SERVED_VARIABLES = frozenset({"label_values(GPU_UUID)"})


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The table of docs/migrating.md."""
    out = [
        f"Labels on every dcgm-exporter series: {DCGM_LABELS}.",
        "",
        f"Labels on every device-metrics-exporter series: {AMD_LABELS}.",
        "",
        "| Exporter | Field | We serve | Unit | From | Note, or why not served |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows():
        served = f"`{row.served}`" if row.served and row.served != "(label)" else row.served
        source = f"`{row.source}`" if row.source else ""
        mark = served or "**not served**"
        out.append(
            f"| {row.exporter} | `{row.field}` | {_cell(mark)} | {row.unit} | {_cell(source)}"
            f" | {_cell(row.note)} |"
        )
    return "\n".join(out) + "\n\n" + versions_markdown() + "\n" + registry_markdown()


def versions_markdown() -> str:
    """The per-release dcgm-exporter table: legacy field, its name and unit in each release."""
    from exporter.outputs.compat.dcgm_table import served_units
    from exporter.outputs.compat.dcgm_versions import VERSIONS

    names = list(VERSIONS)
    head = " | ".join(f"dcgm@{v} (unit)" for v in names)
    out = [
        "Each release's names (`compat: [dcgm@<version>]`; `dcgm` is 4.8). Driver-version"
        " label: " + ", ".join(f"{v} `{VERSIONS[v].driver_label}`" for v in names) + ".",
        "",
        f"| Legacy field | {head} |",
        "|---|" + "---|" * len(names),
    ]
    units = {v: served_units(v) for v in names}
    legacy = [*(f.name for f in dcgm.ORDER), *dcgm.ADDED]
    for field in legacy:
        cells = []
        for v in names:
            spec = VERSIONS[v]
            if field in spec.dropped:
                cells.append("**not served**: name not sourced")
                continue
            if field in dcgm.ADDED and field not in spec.added:
                cells.append("not a default")
                continue
            new = spec.renames.get(field)
            name = new.name if new else field
            cells.append(f"`{name}` ({units[v][name]})")
        out.append(f"| `{field}` | " + " | ".join(cells) + " |")
    out += ["", "Sources: " + "; ".join(f"{v}: {VERSIONS[v].source}" for v in names) + "."]
    return "\n".join(out) + "\n"


def registry_markdown() -> str:
    """Every DCGM field a users' collectors CSV may list that we serve, and where it comes from."""
    from exporter.outputs.compat.dcgm_fields import LABELS, REGISTRY

    out = [
        "Fields a collectors CSV (`compat_fields.dcgm`) may list: any other is not served,"
        " logged once at load and written as `accel_compat_field_unserved_info`.",
        "",
        "| DCGM field | From | Name and unit from |",
        "|---|---|---|",
    ]
    for name, (f, source) in REGISTRY.items():
        out.append(f"| `{name}` | `{_cell(_source(f.source, f.dims))}` | {_cell(source)} |")
    for name, key in LABELS.items():
        out.append(f"| `{name}` (label) | `accel_device_info` `{key}` | dcgm_fields.h |")
    return "\n".join(out) + "\n"
