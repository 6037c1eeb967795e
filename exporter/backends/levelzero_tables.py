"""The Level Zero backend's tables and device records: codes, labels, reading functions.

Data the bootstrap (:mod:`exporter.backends.levelzero`) and the poll's readings
(:mod:`exporter.backends.levelzero_read`) share, kept below both.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from exporter.backends import levelzero_binding as zb
from exporter.backends.contract import Codes
from exporter.backends.counters import Delta, Energy
from exporter.family_names import (
    ACCEL_INTEL_RAS_CORRECTABLE_ERRORS_TOTAL,
    ACCEL_INTEL_RAS_UNCORRECTABLE_ERRORS_TOTAL,
)

SOURCE = "levelzero"
ZE_DEVICE_TYPE_GPU = 1
ZES_MEM_LOC_DEVICE = 1

# Results that say "this reading does not exist here" rather than a fault.
ABSENT = frozenset(
    {zb.UNSUPPORTED_FEATURE, zb.UNSUPPORTED_ENUMERATION, zb.UNSUPPORTED_VERSION, zb.NOT_AVAILABLE}
)
# Results that end the device's poll, with the down reason.
DOWN = {
    zb.DEVICE_LOST: "gpu_lost",
    zb.DEVICE_REQUIRES_RESET: "reset_required",
    zb.SURVIVABILITY_MODE_DETECTED: "survivability_mode",
}
# The backend contract's table (exporter.backends.contract). INSUFFICIENT_PERMISSIONS
# is absent too, and also exported as accel_intel_reading_denied_info (see _bad).
CODES: Codes[int] = Codes(
    names=zb.RESULT_NAMES,
    absent=ABSENT | {zb.INSUFFICIENT_PERMISSIONS},
    gone=DOWN,
    unknown="ze_result_{:#x}",
)

# zes_engine_group_t *_ALL groups -> engine label (the single-engine groups are left out).
ENGINE_GROUPS = {
    0: "all",
    1: "compute",
    2: "media",
    3: "copy",
    11: "3d_render_compute",
    12: "render",
    13: "3d",
}
# Preference for accel_utilization_ratio: the busy share of the engines that run kernels.
UTILIZATION_FROM = ("compute", "3d_render_compute", "render", "all")
# zes_temp_sensors_t -> sensor label; the *_min sensors are minima, the others maxima.
SENSORS = {
    0: "global",
    1: "gpu",
    2: "memory",
    3: "global_min",
    4: "gpu_min",
    5: "memory_min",
    6: "board",  # the board's sensors, "board" as on Gaudi (catalog/vocabulary.py)
    7: "board_min",
    8: "voltage_regulator",
}
# zes_freq_domain_t -> clock label: the GPU core and media domains are the clocks
# NVIDIA and AMD call graphics and video (catalog/vocabulary.py).
CLOCKS = {0: "graphics", 1: "memory", 2: "video"}
# zes_freq_throttle_reason_flags_t bits -> reason label.
THROTTLE_REASONS = (
    (1, "ave_pwr_cap"),
    (2, "burst_pwr_cap"),
    (4, "current_limit"),
    (8, "thermal_limit"),
    (16, "psu_alert"),
    (32, "sw_range"),
    (64, "hw_range"),
    (128, "voltage"),
    (256, "thermal"),
    (512, "power"),
)
# zes_ras_error_type_t (0 correctable, 1 uncorrectable) -> accel_ecc_errors_total type:
# the words every vendor uses (catalog/vocabulary.py).
ECC_TYPES = ("corrected", "uncorrected")
RAS_CATEGORIES = (
    "reset",
    "programming",
    "driver",
    "compute",
    "non_compute",
    "cache",
    "display",
)
RAS_FAMILIES = (
    ACCEL_INTEL_RAS_CORRECTABLE_ERRORS_TOTAL,
    ACCEL_INTEL_RAS_UNCORRECTABLE_ERRORS_TOTAL,
)
# zes_reset_reason_flag_t bits -> accel_intel_reset_reason_info's reason label.
RESET_REASONS = ((1, "wedged"), (2, "repair"))
# zes_fabric_port_status_t: HEALTHY 1 and DEGRADED 2 carry traffic.
PORT_UP = frozenset({1, 2})


# The pyzes functions each reading calls: a loader older than pyzes may lack some, and
# pyzes raises AttributeError for those, so a reading whose functions are not all
# there is left out from the start.
READING_FUNCTIONS = {
    "engines": ("zesDeviceEnumEngineGroups", "zesEngineGetProperties", "zesEngineGetActivity"),
    "memory": ("zesDeviceEnumMemoryModules", "zesMemoryGetProperties", "zesMemoryGetState"),
    "memory_bandwidth": ("zesMemoryGetBandwidth",),
    "power": ("zesDeviceEnumPowerDomains", "zesPowerGetProperties", "zesPowerGetEnergyCounter"),
    "clocks": (
        "zesDeviceEnumFrequencyDomains",
        "zesFrequencyGetProperties",
        "zesFrequencyGetState",
    ),
    "temperature": (
        "zesDeviceEnumTemperatureSensors",
        "zesTemperatureGetProperties",
        "zesTemperatureGetState",
    ),
    "pcie": ("zesDevicePciGetProperties", "zesDevicePciGetStats", "zesDevicePciGetState"),
}


def text(raw: bytes) -> str:
    """A Sysman string: decoded, printable, and empty for the spec's "unknown"."""
    value = raw.decode("utf-8", "replace")
    value = "".join(ch for ch in value if ch.isprintable()).strip()
    return "" if value.lower() == "unknown" else value


@dataclass
class Component:
    """One Sysman component handle, its fixed properties and its previous sample."""

    handle: Any
    kind: int = 0
    tile: int = 0
    size: int = 0
    label: str = ""
    delta: Delta = field(default_factory=Delta)
    tx: Delta = field(default_factory=Delta)


@dataclass
class Gpu:
    """One enumerated Intel GPU: handle, identity and components."""

    index: int
    handle: Any
    device: str
    uuid: str
    info: dict[str, str]
    engines: list[Component] = field(default_factory=list)
    # Engine groups of each label (one per tile).
    tiles_of: dict[str, int] = field(default_factory=dict)
    memory: list[Component] = field(default_factory=list)
    power: list[Component] = field(default_factory=list)
    clocks: list[Component] = field(default_factory=list)
    sensors: list[Component] = field(default_factory=list)
    ras: list[Component] = field(default_factory=list)
    ports: list[Component] = field(default_factory=list)
    pci_max: tuple[int, int] = (-1, -1)
    have_bandwidth: bool = False
    have_replay: bool = False
    energy: Energy = field(default_factory=lambda: Energy(1_000_000))
    pci_rx: Delta = field(default_factory=Delta)
    pci_tx: Delta = field(default_factory=Delta)
    # Readings the driver refused to this process (INSUFFICIENT_PERMISSIONS).
    denied: set[str] = field(default_factory=set)
    unidentified: str = ""
    down: str = ""
    # Readings that failed (not absent, not denied) since the worker started, by reason.
    errors: dict[str, int] = field(default_factory=dict)


def _made(kind: Any) -> tuple[Any, Any]:
    """A new ``kind`` struct and its byref(), for a call to fill in."""
    struct = kind()
    return struct, ctypes.byref(struct)


class Structs:
    """Output structs the fast readings reuse (and their byref()s), made once."""

    def __init__(self, ze: Any) -> None:
        self.mem_state, self.mem_state_ref = _made(ze.zes_mem_state_t)
        self.mem_bandwidth, self.mem_bandwidth_ref = _made(ze.zes_mem_bandwidth_t)
        self.energy, self.energy_ref = _made(ze.zes_power_energy_counter_t)
        self.engine, self.engine_ref = _made(ze.zes_engine_stats_t)
        self.double, self.double_ref = _made(ctypes.c_double)
        self.freq, self.freq_ref = _made(ze.zes_freq_state_t)
        self.pci_stats, self.pci_stats_ref = _made(ze.zes_pci_stats_t)
        self.pci_state, self.pci_state_ref = _made(ze.zes_pci_state_t)
        self.port_state, self.port_state_ref = _made(zb.FabricPortState)
        self.port_throughput, self.port_throughput_ref = _made(zb.FabricPortThroughput)


def uuid_text(raw: bytes) -> str:
    """The 16 uuid bytes as 8-4-4-4-12 hex; empty when all zero (not known)."""
    if not any(raw):
        return ""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
