"""dcgm-exporter's names, units and labels per release, kept as data with their sources.

``4.8`` is the vocabulary of etc/default-counters.csv at tag 4.5.3-4.8.2 (the
fixture in tests/fixtures/compat/dcgm-exporter/). dcgm-exporter 4.9.0 renamed the
default and profiling-preset fields that DCGM 4.7 deprecates to their DCGM 4.7
names and the driver-version label to ``DCGM_FI_SYSTEM_DRIVER_VERSION``, and
collects ``DCGM_FI_DEV_FB_CAPACITY_BYTES`` by default; 4.10.0 renamed
``DCGM_FI_PROF_PCIE_{TX,RX}_BYTES`` to ``..._BYTES_PER_SECOND``.

Sources (upstream 4.9.0/4.10.0 files were not to be had: the stored snapshot of
NVIDIA/dcgm-exporter ends at 4.5.3-4.8.2):
- renames: NVIDIA/DCGM dcgmlib/dcgm_fields.h at 72fa3feaa67d716a75323a8f47c34ff3ee73f824,
  block "Deprecated: renamed per DCGM Field Naming Standard" (old -> new, same field id);
- units, driver label, FB_CAPACITY_BYTES: dcgm-exporter 4.9.0 release notes
  (newreleases.io/project/github/NVIDIA/dcgm-exporter/release/4.9.0);
- PCIe renames: github.com/NVIDIA/dcgm-exporter/releases/tag/4.10.0;
- clocks in Hz and energy in J: NVIDIA/go-dcgm (the DCGM bindings dcgm-exporter
  builds on) pkg/dcgm/dcgm_fields.h at b7fa31542404a9090ad0d1aabbbe592afbe234cb
  (tag v1.4611.0), block "Base unit field IDs (1600-1799)": new field ids in base
  units next to the legacy ones (not aliases), each legacy one marked "Deprecated:
  Use ... instead" in pkg/dcgm/const_fields.go and paired with it in
  pkg/dcgm/base_unit_fields_test.go at the same commit.
A legacy field whose DCGM 4.7 name none of these gives (the unit-changing
copy/encoder/decoder utilization and framebuffer fields: that block has no ratio or
byte field for them) is left out of 4.9 and 4.10, with that reason, rather than
served under a guessed name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

DCGM_H = "NVIDIA/DCGM dcgmlib/dcgm_fields.h @72fa3fea (deprecated-name block)"
NOTES_49 = "dcgm-exporter 4.9.0 release notes"
NOTES_410 = "dcgm-exporter 4.10.0 release notes"
CSV_48 = "dcgm-exporter etc/default-counters.csv @4.5.3-4.8.2"
GO_DCGM = "NVIDIA/go-dcgm pkg/dcgm/dcgm_fields.h @b7fa3154 (v1.4611.0, base-unit field ids)"


@dataclass(frozen=True)
class Rename:
    """A legacy field's name (and unit, when it changed) in one release."""

    name: str
    source: str
    unit: str = ""  # "" when the unit did not change
    help: str = ""  # "" keeps the legacy help text
    # Applied to our family's value instead of the legacy conversion (None: the legacy one).
    scale: Callable[[float], float] | None = None


@dataclass(frozen=True)
class Version:
    """One dcgm-exporter release's vocabulary."""

    version: str
    driver_label: str
    source: str
    renames: dict[str, Rename] = field(default_factory=dict)
    # Legacy fields this release serves under a name we cannot source: left out, why.
    dropped: dict[str, str] = field(default_factory=dict)
    # Fields this release adds to the defaults (their names; the registry has them).
    added: tuple[str, ...] = ()


_NO_NAME = (
    "dcgm-exporter 4.9.0 renamed it to its DCGM 4.7 name with a new unit; neither the"
    " release notes nor the dcgm_fields.h we could read (NVIDIA/DCGM @72fa3fea, NVIDIA/go-dcgm"
    " @b7fa3154 with its base-unit field ids) give that name, so it is not served under a"
    " guessed one (serve it with compat: [dcgm@4.8])"
)
_49 = {
    # New field ids in base units (go-dcgm 1603, 1604, 1611; legacy 100, 101, 156).
    "DCGM_FI_DEV_SM_CLOCK": Rename(
        "DCGM_FI_DEV_SM_CLOCK_HERTZ", f"{GO_DCGM}; unit: {NOTES_49}", "Hz",
        "SM clock frequency (in Hz).", float,
    ),
    "DCGM_FI_DEV_MEM_CLOCK": Rename(
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", f"{GO_DCGM}; unit: {NOTES_49}", "Hz",
        "Memory clock frequency (in Hz).", float,
    ),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Rename(
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", f"{GO_DCGM}; unit: {NOTES_49}", "J",
        "Total energy consumption since the driver was last reloaded (in J).", float,
    ),
    "DCGM_FI_DEV_MEMORY_TEMP": Rename("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", DCGM_H),
    "DCGM_FI_DEV_GPU_TEMP": Rename("DCGM_FI_DEV_GPU_TEMP_CELSIUS", DCGM_H),
    "DCGM_FI_DEV_POWER_USAGE": Rename("DCGM_FI_DEV_BOARD_POWER_WATTS", DCGM_H),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Rename("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", DCGM_H),
    "DCGM_FI_DEV_GPU_UTIL": Rename(
        "DCGM_FI_DEV_GPU_UTIL_RATIO", f"{DCGM_H}; unit: {NOTES_49}", "ratio",
        "GPU utilization (ratio 0 to 1).", float,
    ),
    "DCGM_FI_DEV_XID_ERRORS": Rename("DCGM_FI_DEV_XID_ERROR", DCGM_H),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Rename(
        "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", DCGM_H
    ),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Rename(
        "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", DCGM_H
    ),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": Rename("DCGM_FI_DEV_ROW_REMAP_FAILED", DCGM_H),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Rename("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", DCGM_H),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Rename("DCGM_FI_PROF_TENSOR_UTIL_RATIO", DCGM_H),
    "DCGM_FI_PROF_DRAM_ACTIVE": Rename("DCGM_FI_PROF_DRAM_UTIL_RATIO", DCGM_H),
}  # fmt: skip
_49_DROPPED = dict.fromkeys(
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
    ),
    _NO_NAME,
)
_410 = {
    **_49,
    "DCGM_FI_PROF_PCIE_TX_BYTES": Rename("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", NOTES_410),
    "DCGM_FI_PROF_PCIE_RX_BYTES": Rename("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", NOTES_410),
}

VERSIONS: dict[str, Version] = {
    "4.8": Version("4.8", "DCGM_FI_DRIVER_VERSION", CSV_48),
    "4.9": Version(
        "4.9", "DCGM_FI_SYSTEM_DRIVER_VERSION", f"{NOTES_49}; {DCGM_H}; {GO_DCGM}", _49,
        _49_DROPPED, ("DCGM_FI_DEV_FB_CAPACITY_BYTES",),
    ),
    "4.10": Version(
        "4.10", "DCGM_FI_SYSTEM_DRIVER_VERSION",
        f"{NOTES_410}; {NOTES_49}; {DCGM_H}; {GO_DCGM}", _410, _49_DROPPED,
        ("DCGM_FI_DEV_FB_CAPACITY_BYTES",),
    ),
}  # fmt: skip
DEFAULT = "4.8"
# The config entries: "dcgm" is today's names (4.8), "dcgm@<version>" pins one.
ENTRIES = ("dcgm", *(f"dcgm@{v}" for v in VERSIONS))


def version_of(entry: str) -> str | None:
    """The release a compat entry names (``dcgm`` -> 4.8), None for another peer."""
    if entry == "dcgm":
        return DEFAULT
    if entry.startswith("dcgm@") and entry[5:] in VERSIONS:
        return entry[5:]
    return None
