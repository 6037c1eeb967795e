"""Every DCGM field we can serve, by its DCGM name: the family it comes from and its unit.

Legacy names are those of dcgm-exporter's default-counters.csv @4.5.3-4.8.2 and
of the DCP (profiling) fields NVIDIA's DCGM documents; the DCGM 4.7 names come
from NVIDIA/DCGM dcgmlib/dcgm_fields.h's deprecated-name block (old -> new, same
field id) and the 4.10 ``..._BYTES_PER_SECOND`` names from dcgm-exporter 4.10.0's
release notes. The DCP fields are read through NVML GPM (Hopper and later): the
``accel_*`` families whose catalog help names GPM. Each value is written in the
field's own unit: DCGM's ratios 0..1, bytes per second, and the legacy MHz/MiB/mJ/%
conversions of :mod:`exporter.outputs.compat.dcgm`. Label fields (collectors CSV
type ``label``) map to a device-info label.
"""

from __future__ import annotations

from dataclasses import replace

from exporter.family_names import (
    ACCEL_NVLINK_RX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_NVLINK_TX_AVERAGE_BYTES_PER_SECOND,
    ACCEL_PIPE_ACTIVE_RATIO,
    ACCEL_SM_ACTIVE_RATIO,
    ACCEL_SM_OCCUPANCY_RATIO,
)
from exporter.outputs.compat.dcgm import ADDED, ORDER, Field
from exporter.outputs.compat.dcgm_versions import DCGM_H, NOTES_410, VERSIONS

GPM = "NVML GPM (Hopper and later)"


def _dcp(name: str, source: str, dims: tuple[str, ...] = ()) -> Field:
    # Kind and help come from the user's CSV; these are dcgm-exporter's defaults.
    return Field(name, "gauge", name, source, dims)


# (legacy name, DCGM 4.7 name) for the DCP fields not in the default list, and their family.
PIPE = ACCEL_PIPE_ACTIVE_RATIO
_DCP = (
    ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO", ACCEL_SM_ACTIVE_RATIO, ()),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", ACCEL_SM_OCCUPANCY_RATIO,
     ()),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_FP64_UTIL_RATIO", PIPE, ("fp64",)),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_FP32_UTIL_RATIO", PIPE, ("fp32",)),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO", PIPE, ("fp16",)),
    ("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "DCGM_FI_PROF_HMMA_UTIL_RATIO", PIPE, ("tensor_hmma",)),  # noqa: E501
    ("DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", "DCGM_FI_PROF_IMMA_UTIL_RATIO", PIPE, ("tensor_imma",)),  # noqa: E501
    ("DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", "DCGM_FI_PROF_DFMA_UTIL_RATIO", PIPE, ("tensor_dfma",)),  # noqa: E501
    ("DCGM_FI_PROF_PIPE_INT_ACTIVE", "DCGM_FI_PROF_INT_UTIL_RATIO", PIPE, ("integer",)),
)  # fmt: skip
# NVLink byte rates: DCGM names them TX/RX_BYTES (and _BYTES_PER_SECOND from 4.10).
_NVLINK = (
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", ACCEL_NVLINK_TX_AVERAGE_BYTES_PER_SECOND),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", ACCEL_NVLINK_RX_AVERAGE_BYTES_PER_SECOND),
)


def _registry() -> dict[str, tuple[Field, str]]:
    out: dict[str, tuple[Field, str]] = {
        f.name: (f, "default-counters.csv @4.5.3-4.8.2") for f in ORDER
    }
    out.update({name: (f, "dcgm-exporter 4.9.0 release notes") for name, f in ADDED.items()})
    for spec in VERSIONS.values():
        for legacy, new in spec.renames.items():
            f = out[legacy][0]
            scale = f.scale if new.scale is None else new.scale
            out[new.name] = (replace(f, name=new.name, scale=scale), new.source)
    for legacy, current, source, dims in _DCP:
        out[legacy] = (_dcp(legacy, source, dims), GPM)
        out[current] = (_dcp(current, source, dims), f"{GPM}; name: {DCGM_H}")
    for legacy, source in _NVLINK:
        out[legacy] = (_dcp(legacy, source), GPM)
        out[f"{legacy}_PER_SECOND"] = (
            _dcp(f"{legacy}_PER_SECOND", source),
            f"{GPM}; name: {NOTES_410}",
        )
    return out


# DCGM field name -> (how we serve it, where its name and unit come from).
REGISTRY = _registry()
# Label fields (CSV type "label") -> the accel_device_info label holding the value.
LABELS = {
    "DCGM_FI_DRIVER_VERSION": "driver_version",
    "DCGM_FI_SYSTEM_DRIVER_VERSION": "driver_version",
    "DCGM_FI_DEV_NAME": "model",
    "DCGM_FI_DEV_GPU_NAME": "model",
    "DCGM_FI_DEV_SERIAL": "serial",
    "DCGM_FI_DEV_BOARD_SERIAL": "serial",
    "DCGM_FI_DEV_UUID": "uuid",
    "DCGM_FI_DEV_GPU_UUID": "uuid",
    "DCGM_FI_DEV_PCI_BUSID": "pci_bus_id",
    "DCGM_FI_DEV_PCI_BUS_ID": "pci_bus_id",
    "DCGM_FI_DEV_VBIOS_VERSION": "vbios",
}
# Fields whose nature is a counter (a CSV that lists one as a gauge is noted once).
COUNTERS = frozenset(n for n, (f, _) in REGISTRY.items() if f.kind == "counter")
