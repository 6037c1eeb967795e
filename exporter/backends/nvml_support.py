"""NVML facts the NVIDIA backend needs: error classes, field ids, bit tables, units.

Pure data and small helpers, no library calls, so they can be tested alone.
Sources: ``nvml.h`` (13.x) and nvidia-ml-py's ``pynvml.py``.
"""

from __future__ import annotations

import struct
from typing import Any

# The widths' all-ones values are the contract's; U64_MAX stays a name here for nvml's users.
from exporter.backends.contract import NOT_AVAILABLE, U16_MAX, U32_MAX, Codes
from exporter.backends.contract import U64_MAX as U64_MAX

# nvmlReturn_t codes (nvml.h) -> the snake_case reason exported in labels.
REASONS: dict[int, str] = {
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    4: "no_permission",
    5: "already_initialized",
    6: "not_found",
    7: "insufficient_size",
    8: "insufficient_power",
    9: "driver_not_loaded",
    10: "nvml_timeout",
    11: "irq_issue",
    12: "library_not_found",
    13: "function_not_found",
    14: "corrupted_inforom",
    15: "gpu_lost",
    16: "reset_required",
    17: "operating_system",
    18: "driver_mismatch",
    19: "in_use",
    20: "memory",
    21: "no_data",
    22: "vgpu_ecc_not_supported",
    23: "insufficient_resources",
    24: "freq_not_supported",
    25: "argument_version_mismatch",
    26: "deprecated",
    27: "not_ready",
    28: "gpu_not_found",
    29: "invalid_state",
    999: "unknown",
}

SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
ARGUMENT_VERSION_MISMATCH = 25

# The device as a whole is gone or unusable: stop reading it, export it down.
DEVICE_FATAL = frozenset({1, DRIVER_NOT_LOADED, GPU_IS_LOST, 16, 18, 28})
# "This field does not exist here": omit it silently (a fact about the SKU,
# the driver version or the container's permissions, not a fault).
ABSENT = frozenset({NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND, 21, 26})
# The backend contract's table (exporter.backends.contract): a gone GPU is down with
# the code's own reason (gpu_lost, reset_required, ...).
CODES: Codes[int] = Codes(
    names=REASONS,
    absent=ABSENT,
    gone={code: REASONS[code] for code in DEVICE_FATAL},
    unknown="nvml_error_{}",
)
# A newer entry point that answers one of these for a GPU is retried with the
# older one: it does not serve this GPU (or this struct version), the older may.
DOWNGRADE = ABSENT | {INVALID_ARGUMENT, ARGUMENT_VERSION_MISMATCH}

# nvmlClockType_t -> label
CLOCKS = ((0, "graphics"), (1, "sm"), (2, "memory"), (3, "video"))

# nvmlClocksEventReason* bits -> label (the bits of the deprecated throttle API are the same)
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# Field ids of nvmlDeviceGetFieldValues (nvml.h NVML_FI_DEV_*).
FI_MEMORY_TEMP = 82
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, per link in scopeId
FI_NVLINK_THROUGHPUT_DATA_RX = 139
# Time spent throttled, nanoseconds ("All counters are in nanoseconds", nvml.h).
VIOLATION_FIELDS = (
    (74, "sw_power_cap"),  # PERF_POLICY_POWER == CLOCKS_EVENT_REASON_SW_POWER_CAP
    (75, "thermal"),
    (76, "sync_boost"),
    (77, "board_limit"),
    (78, "low_utilization"),
    (79, "reliability"),
    (269, "sw_thermal_slowdown"),
    (270, "hw_thermal_slowdown"),
    (271, "hw_power_brake_slowdown"),
)

# nvmlEventType bits the worker listens for -> event label (XID has its own families).
EVENT_XID = 0x8
EVENTS = (
    (0x1, "single_bit_ecc"),
    (0x2, "double_bit_ecc"),
    (0x4000, "gpu_unavailable"),
    (0x8000, "recovery_action"),
)
EVENT_MASK = EVENT_XID | sum(bit for bit, _ in EVENTS)

# GPM metric ids (nvmlGpmMetricId_t) for per GPU-instance utilization on MIG.
GPM_GRAPHICS_UTIL = 1
GPM_DRAM_BW_UTIL = 10

ECC_TYPES = ((0, "corrected"), (1, "uncorrected"))
ECC_COUNTERS = ((0, "volatile"), (1, "aggregate"))
RETIREMENT_CAUSES = ((0, "multiple_single_bit_ecc"), (1, "double_bit_ecc"))


# Every pynvml function the backend calls (tests/unit/test_nvml_support.py checks
# the backend's sources against this list): resolved once, see backends.binding.
FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetNumFans",
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v2",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmMigSampleGet",
    "nvmlGpmSampleGet",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetPlatformInfo",
    "nvmlDeviceGetSramEccErrorStatus",
    "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetMarginTemperature",
    "nvmlSystemGetProcessName",
    "nvmlGpmMetricsGet",
    "nvmlEventSetCreate",
    "nvmlEventSetWait",
    "nvmlEventSetFree",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
)


def reason_of(code: int) -> str:
    """The exported reason for an NVML return code."""
    return CODES.reason(code)


# NVML's "not available" encodings: all ones in 32 or 64 bits, and -1 (the Emitter's set).
SENTINELS = NOT_AVAILABLE


# nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value
# (the 8-byte union read as an unsigned long long, then reinterpreted by valueType:
# 0 double, 1 uint, 2 ulong (LP64), 3 ull, 4 sll, 5 sint, 6 ushort).
FIELD_VALUE = struct.Struct("=IIqqIIQ")
# Where (valueType, nvmlReturn) and the value sit in an entry, counted in 4-byte and
# 8-byte words: a poll reads them as three columns (see field_columns).
_ENTRY_WORDS, _KIND_WORD, _CODE_WORD = FIELD_VALUE.size // 4, 6, 7
_ENTRY_QWORDS, _VALUE_QWORD = FIELD_VALUE.size // 8, 4
# nvmlUtilization_t {gpu, memory}; nvmlMemory_t {total, free, used};
# nvmlMemory_v2_t {version, (pad), total, reserved, free, used}.
UTILIZATION = struct.Struct("=II")
MEMORY_V1 = struct.Struct("=QQQ")
MEMORY_V2 = struct.Struct("=I4xQQQQ")
_DOUBLE = struct.Struct("=d")
_RAW = struct.Struct("=Q")


# valueTypes whose raw 64 bits are the number as they are: unsigned long (LP64) and
# unsigned long long.
RAW_KINDS = frozenset({2, 3})


def union_value(kind: int, raw: int) -> float:
    """The number in an nvmlValue_t union given as its 64 raw bits."""
    if kind == 2 or kind == 3:
        return float(raw)
    if kind == 1:
        return float(raw & U32_MAX)
    if kind == 0:
        return float(_DOUBLE.unpack(_RAW.pack(raw))[0])
    if kind == 4:
        return float(raw - (1 << 64) if raw >> 63 else raw)
    if kind == 5:
        low = raw & U32_MAX
        return float(low - (1 << 32) if low >> 31 else low)
    if kind == 6:
        short = raw & U16_MAX
        return float(U32_MAX if short == U16_MAX else short)  # all-ones: "not available"
    return float(raw)


def field_entries(values: Any) -> list[tuple[int, int, int, float]]:
    """(fieldId, scopeId, nvmlReturn, number) of each entry of an nvmlFieldValue_t array.

    Decoded from the array's bytes in one pass: pynvml's per-attribute access on
    its structs costs more than the library call itself.
    """
    return [
        (fid, scope, code, union_value(kind, raw))
        for fid, scope, _ts, _latency, kind, code, raw in FIELD_VALUE.iter_unpack(bytes(values))
    ]


def field_columns(values: Any) -> tuple[memoryview, memoryview, list[int]]:
    """(valueType, nvmlReturn, raw value) columns of an nvmlFieldValue_t array.

    Sliced from the array's bytes by C routines, not decoded entry by entry: a
    poll asks ~50 entries per GPU, and Python work per entry was the largest single
    share of the backend's cost over the bare library calls.
    """
    raw = memoryview(bytes(values))
    words = raw.cast("I")
    return (
        words[_KIND_WORD::_ENTRY_WORDS],
        words[_CODE_WORD::_ENTRY_WORDS],
        raw.cast("Q")[_VALUE_QWORD::_ENTRY_QWORDS].tolist(),
    )


def text(value: Any) -> str:
    """A string from what pynvml returns (bytes or str), stripped of NULs and spaces."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip("\x00 ").strip()


def mig_profile(name: str) -> str:
    """The GPU instance profile in a MIG device's name (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``).

    The same text DCGM reports as the profile name; empty when the name has none.
    """
    _, marker, profile = name.rpartition(" MIG ")
    return profile.strip() if marker else ""


def mig_mode(mode: Any) -> str:
    """The ``mig_mode`` label of nvmlDeviceGetMigMode's (current, pending); "" unknown."""
    if mode is None:
        return ""
    return "enabled" if mode[0] == 1 else "disabled"


def cuda_version(value: int) -> str:
    """12080 -> "12.8" (nvmlSystemGetCudaDriverVersion encoding)."""
    return f"{value // 1000}.{value % 1000 // 10}"
