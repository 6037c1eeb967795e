"""The migration table: every field of both originals' default lists, served or not, and why.

Documentation data, outside the runtime package: docs/migrating.md's table is
generated from here (scripts/gen_docs.py), and the compat tests skip exactly the
dashboard queries of the metrics listed here as not served: one list for the
documentation and the tests. The part the daemon needs (device-metrics-exporter's
field names and why compat leaves some out) is
:mod:`exporter.outputs.compat.amd_unserved`, which this table reads rather than
repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog import CATALOG
from exporter.outputs.compat import amd, dcgm
from exporter.outputs.compat.amd_unserved import AMD_FIELDS, unserved_reason
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
    rows = []
    for field in AMD_FIELDS:
        name, why = field.lower(), unserved_reason(field)
        if name in served:
            if why:  # the daemon would call a served field unserved
                raise ValueError(f"{field} is served and has an unserved reason: {why}")
            source = served[name][0]
            rows.append(Row(AMD, field, name, _amd_unit(name), source, _AMD_NOTES.get(name, "")))
        elif why:
            rows.append(Row(AMD, field, "", "", "", why))
        else:
            raise ValueError(f"{field} is neither served nor given a reason")
    return rows


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
