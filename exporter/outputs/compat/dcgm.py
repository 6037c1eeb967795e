"""dcgm-exporter 4.x's series for NVIDIA devices, from our readings of the same poll.

The fields are those of dcgm-exporter's ``etc/default-counters.csv`` (tag
4.5.3-4.8.2) we read, under its names, types, help and units (MHz, MiB, mJ,
percent, ratios), with its labels: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``
(``nvidia<i>``), ``modelName``, ``GPU_I_PROFILE``/``GPU_I_ID`` on MIG,
``Hostname`` (the name every released 4.x writes), the label field
``DCGM_FI_DRIVER_VERSION``, and ``pod``, ``namespace``, ``container`` and
``hpc_job`` when the device is attributed. docs/migrating.md lists the fields we
do not serve and why. ``build(..., version=)`` writes another release's names,
units and driver-version label (:mod:`exporter.outputs.compat.dcgm_versions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from exporter.family_names import (
    ACCEL_CLOCK_HERTZ,
    ACCEL_DECODER_UTILIZATION_RATIO,
    ACCEL_DEVICE_UP,
    ACCEL_DRAM_ACTIVE_RATIO,
    ACCEL_ENCODER_UTILIZATION_RATIO,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_GRAPHICS_ENGINE_ACTIVE_RATIO,
    ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_RESERVED_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_MIG_DEVICE_INFO,
    ACCEL_MIG_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MIG_MEMORY_FREE_BYTES,
    ACCEL_MIG_MEMORY_TOTAL_BYTES,
    ACCEL_MIG_MEMORY_USED_BYTES,
    ACCEL_MIG_UTILIZATION_RATIO,
    ACCEL_MIG_WORKLOAD_INFO,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_PCIE_RX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PCIE_TX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PIPE_ACTIVE_RATIO,
    ACCEL_POWER_WATTS,
    ACCEL_REMAPPED_ROWS,
    ACCEL_REMAPPED_ROWS_FAILURE,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
    ACCEL_XID_LAST_TIMESTAMP_SECONDS,
)
from exporter.outputs.compat.dcgm_versions import DEFAULT, VERSIONS
from exporter.outputs.compat.dcgm_xid import NO_ERROR, UNKNOWN, XID_TEXT
from exporter.outputs.compat.family import Family
from exporter.outputs.compat.view import Device, Readings, devices
from exporter.store import View

MIB = float(1 << 20)
NOBODY = ("", "", "")


@dataclass(frozen=True)
class Field:
    """One dcgm-exporter field served from one of our families."""

    name: str
    kind: str
    help: str
    source: str
    dims: tuple[str, ...] = ()
    scale: Callable[[float], float] = float
    # Served for MIG GPU instances from this family (None: the whole GPU only).
    mig_source: str | None = None


def _percent(ratio: float) -> float:
    # DCGM's utilization fields are integer percents.
    return float(round(ratio * 100))


# The fields in default-counters.csv order; help texts as there.
FIELDS = (
    Field(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", ACCEL_CLOCK_HERTZ,
        ("sm",), lambda hz: hz / 1e6,
    ),
    Field(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", ACCEL_CLOCK_HERTZ,
        ("memory",), lambda hz: hz / 1e6,
    ),
    Field(
        "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
        ACCEL_TEMPERATURE_CELSIUS, ("memory",),
    ),
    Field(
        "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", ACCEL_TEMPERATURE_CELSIUS,
        ("gpu",),
    ),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", ACCEL_POWER_WATTS),
    Field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
        "Total energy consumption since boot (in mJ).", ACCEL_ENERGY_JOULES_TOTAL,
        scale=lambda j: j * 1000,
    ),
    Field(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
        ACCEL_PCIE_REPLAYS_TOTAL,
    ),
    Field(
        "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", ACCEL_UTILIZATION_RATIO,
        scale=_percent,
    ),
    Field(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
        ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO, scale=_percent,
    ),
    Field(
        "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
        ACCEL_ENCODER_UTILIZATION_RATIO, scale=_percent,
    ),
    Field(
        "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
        ACCEL_DECODER_UTILIZATION_RATIO, scale=_percent,
    ),
    Field(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
        ACCEL_MEMORY_FREE_BYTES, scale=lambda b: b / MIB,
        mig_source=ACCEL_MIG_MEMORY_FREE_BYTES,
    ),
    Field(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
        ACCEL_MEMORY_USED_BYTES, scale=lambda b: b / MIB,
        mig_source=ACCEL_MIG_MEMORY_USED_BYTES,
    ),
    Field(
        "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
        ACCEL_MEMORY_RESERVED_BYTES, scale=lambda b: b / MIB,
    ),
    Field(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
        "Number of remapped rows for uncorrectable errors", ACCEL_REMAPPED_ROWS,
        ("uncorrected",),
    ),
    Field(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
        "Number of remapped rows for correctable errors", ACCEL_REMAPPED_ROWS, ("corrected",),
    ),
    Field(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
        ACCEL_REMAPPED_ROWS_FAILURE,
    ),
    Field(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
        ACCEL_GRAPHICS_ENGINE_ACTIVE_RATIO, mig_source=ACCEL_MIG_UTILIZATION_RATIO,
    ),
    Field(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.", ACCEL_PIPE_ACTIVE_RATIO,
        ("tensor",),
    ),
    Field(
        "DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        ACCEL_DRAM_ACTIVE_RATIO, mig_source=ACCEL_MIG_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ),
    Field(
        "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and"
        " data payloads - in bytes per second.",
        ACCEL_PCIE_TX_AVERAGE_BYTES_PER_SECOND,
    ),
    Field(
        "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and"
        " data payloads - in bytes per second.",
        ACCEL_PCIE_RX_AVERAGE_BYTES_PER_SECOND,
    ),
)  # fmt: skip
XID = Field(
    "DCGM_FI_DEV_XID_ERRORS",
    "gauge",
    "Value of the last XID error encountered.",
    ACCEL_XID_LAST_TIMESTAMP_SECONDS,
)
# The order dcgm-exporter writes them: XID after the utilization fields.
ORDER = (*FIELDS[:11], XID, *FIELDS[11:])
NAMES = tuple(f.name for f in ORDER)
# Fields a later release adds to its defaults (dcgm_versions.Version.added).
ADDED = {
    "DCGM_FI_DEV_FB_CAPACITY_BYTES": Field(
        "DCGM_FI_DEV_FB_CAPACITY_BYTES", "gauge", "Total GPU memory (in bytes).",
        ACCEL_MEMORY_TOTAL_BYTES, mig_source=ACCEL_MIG_MEMORY_TOTAL_BYTES,
    ),
}  # fmt: skip


def fields_of(version: str = DEFAULT) -> tuple[Field, ...]:
    """The fields one release serves by default, under its names, units and help, in order."""
    spec = VERSIONS[version]
    out = []
    for f in ORDER:
        if f.name in spec.dropped:
            continue
        new = spec.renames.get(f.name)
        if new is None:
            out.append(f)
            continue
        scale = f.scale if new.scale is None else new.scale
        out.append(replace(f, name=new.name, help=new.help or f.help, scale=scale))
    return (*out, *(ADDED[name] for name in spec.added))


def _identity(dev: Device) -> list[tuple[str, str]]:
    return [
        ("gpu", dev.index),
        ("UUID", dev.uuid),
        ("pci_bus_id", dev.info.get("pci_bus_id", "")),
        ("device", f"nvidia{dev.index}"),
        ("modelName", dev.info.get("model", "")),
    ]


def _tail(
    dev: Device,
    host: str,
    pod: tuple[str, str, str] | None = None,
    driver_label: str = "DCGM_FI_DRIVER_VERSION",
) -> list[tuple[str, str]]:
    out = [("Hostname", host)] if host else []
    out.append((driver_label, dev.info.get("driver_version", "")))
    namespace, name, container = pod or (
        dev.workload.namespace,
        dev.workload.pod,
        dev.workload.container,
    )
    if name:
        out += [("pod", name), ("namespace", namespace), ("container", container)]
    if dev.workload.job_id:
        out.append(("hpc_job", dev.workload.job_id))
    return out


def _last_xid(readings: Readings, uuid: str) -> int | None:
    """The XID of the newest error, 0 when none arrived; None when XIDs are not read."""
    found = readings.of(ACCEL_XID_LAST_TIMESTAMP_SECONDS, uuid)
    if not found:
        return 0
    newest = max(found, key=lambda r: (float(r.value), r.labels[2]))  # type: ignore[arg-type]
    try:
        return int(newest.labels[2])
    except ValueError:
        return None


def build(
    view: View,
    host: str,
    version: str = DEFAULT,
    order: tuple[Field, ...] | None = None,
    labels: tuple[tuple[str, str], ...] = (),
) -> list[Family]:
    """One release's dcgm-exporter families for every NVIDIA device in ``view``.

    ``order`` replaces the release's default fields (a users' collectors CSV,
    :mod:`exporter.outputs.compat.dcgm_custom`); ``labels`` are (label name,
    accel_device_info label) pairs added to every series, as a CSV ``label`` row does.

    The XID family is written for every device that is up, at 0 (``No Error``)
    before the first XID, so the peer's XID panel is never blank (NVIDIA/dcgm-exporter
    #700); empty families are dropped by the encoder.
    """
    gpus = devices(view, "nvidia")
    if not gpus:
        return []
    readings = Readings(view)
    spec = VERSIONS[version]
    order = fields_of(version) if order is None else order
    xid = next((f for f in order if f.source == XID.source), None)
    plain = tuple(f for f in order if f is not xid)
    label = spec.driver_label
    families = {f.name: Family(f.name, f.kind, f.help) for f in order}
    migs = _mig_instances(view)
    pods = _mig_pods(view)
    for dev in gpus:
        if not readings.of(ACCEL_DEVICE_UP, dev.uuid):
            continue
        instances = migs.get(dev.uuid, {})
        # The device plugin hands out a MIG GPU's instances, not the GPU: as in
        # dcgm-exporter, pods go on the instances' series only.
        ident = _identity(dev)
        extra = [(name, dev.info.get(key, "")) for name, key in labels]
        tail = [*_tail(dev, host, NOBODY if instances else None, label), *extra]
        up = readings.one(ACCEL_DEVICE_UP, dev.uuid)
        for f in plain:
            value = readings.one(f.source, dev.uuid, *f.dims)
            if value is not None:
                families[f.name].add([*ident, *tail], f.scale(value))
        if up == 1 and xid is not None:
            last = _last_xid(readings, dev.uuid)
            if last is not None:
                text = XID_TEXT.get(last, UNKNOWN) if last else NO_ERROR
                attrs = [("err_code", str(last)), ("err_msg", text)]
                families[xid.name].add([*ident, *tail, *attrs], float(last))
        for gi, profile in instances.items():
            mig_ident = [*ident, ("GPU_I_PROFILE", profile), ("GPU_I_ID", gi)]
            mig_tail = [*_tail(dev, host, pods.get((dev.uuid, gi), NOBODY), label), *extra]
            for f in plain:
                if f.mig_source is None:
                    continue
                value = readings.one(f.mig_source, dev.uuid, gi)
                if value is not None:
                    families[f.name].add([*mig_ident, *mig_tail], f.scale(value))
    return [families[f.name] for f in order]


def _mig_instances(view: View) -> dict[str, dict[str, str]]:
    """GPU uuid -> GPU instance -> its MIG profile (``1g.10gb``)."""
    out: dict[str, dict[str, str]] = {}
    for reading in view.readings(ACCEL_MIG_DEVICE_INFO):
        labels = reading.labels  # device, uuid, gpu_instance, compute_instance, mig_uuid, profile
        profile = labels[5] if len(labels) > 5 else ""
        out.setdefault(labels[1], {}).setdefault(labels[2], profile)
    return out


def _mig_pods(view: View) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(GPU uuid, GPU instance) -> (namespace, pod, container) when one container holds it."""
    found: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for reading in view.readings(ACCEL_MIG_WORKLOAD_INFO):
        labels = reading.labels  # device, uuid, gpu_instance, compute_instance, ns, pod, container
        found.setdefault((labels[1], labels[2]), set()).add((labels[4], labels[5], labels[6]))
    return {key: next(iter(v)) for key, v in found.items() if len(v) == 1}
