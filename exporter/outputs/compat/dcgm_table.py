"""Each dcgm-exporter release's served names with their units, and the clash check.

A fleet mid-upgrade asks for two releases at once (``compat: [dcgm@4.8,
dcgm@4.10]``). A name both serve in the same unit is written once (with the newer
release's labels: its driver-version label); a name both serve in two units would
be two different series under one name, so that pair is a config error naming both.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.outputs.compat.dcgm_versions import VERSIONS, version_of

# The legacy (4.8) units, as default-counters.csv @4.5.3-4.8.2 states them in its help.
LEGACY_UNITS = {
    "DCGM_FI_DEV_SM_CLOCK": "MHz",
    "DCGM_FI_DEV_MEM_CLOCK": "MHz",
    "DCGM_FI_DEV_MEMORY_TEMP": "C",
    "DCGM_FI_DEV_GPU_TEMP": "C",
    "DCGM_FI_DEV_POWER_USAGE": "W",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "mJ",
    "DCGM_FI_DEV_GPU_UTIL": "%",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "%",
    "DCGM_FI_DEV_ENC_UTIL": "%",
    "DCGM_FI_DEV_DEC_UTIL": "%",
    "DCGM_FI_DEV_FB_FREE": "MiB",
    "DCGM_FI_DEV_FB_USED": "MiB",
    "DCGM_FI_DEV_FB_RESERVED": "MiB",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "ratio",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "ratio",
    "DCGM_FI_PROF_DRAM_ACTIVE": "ratio",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "B/s",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "B/s",
}
ADDED_UNITS = {"DCGM_FI_DEV_FB_CAPACITY_BYTES": "bytes"}


def served_units(version: str) -> dict[str, str]:
    """Served name -> unit for one release's default fields (imports no builder)."""
    from exporter.outputs.compat.dcgm import ORDER

    spec = VERSIONS[version]
    out: dict[str, str] = {}
    for f in ORDER:
        if f.name in spec.dropped:
            continue
        unit = LEGACY_UNITS.get(f.name, "count")
        new = spec.renames.get(f.name)
        out[new.name if new else f.name] = (new.unit or unit) if new else unit
    out.update({name: ADDED_UNITS[name] for name in spec.added})
    return out


def unit_conflicts(entries: Sequence[str]) -> list[str]:
    """One line per name two requested releases serve in different units."""
    versions = list(dict.fromkeys(v for v in map(version_of, entries) if v is not None))
    out = []
    for i, a in enumerate(versions):
        for b in versions[i + 1 :]:
            ua, ub = served_units(a), served_units(b)
            out += [
                f"{name} is dcgm@{a} in {ua[name]} and dcgm@{b} in {ub[name]}: serve one of"
                " the two releases"
                for name in sorted(ua.keys() & ub.keys())
                if ua[name] != ub[name]
            ]
    return out
