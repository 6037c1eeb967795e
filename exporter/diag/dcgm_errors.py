"""DCGM's table of diagnostic error codes: each ``DCGM_FR_*`` code, its severity and category.

Data, copied from NVIDIA/DCGM at DCGM 4.6.0 (commit 72fa3fe): the codes from
``dcgmlib/dcgm_errors.h`` (``dcgmError_t``), each code's severity and category from
the table ``dcgmErrorMeta`` in ``dcgmlib/src/dcgm_errors.c`` (``DCGM_ERROR_TABLE_ENTRY``).
The enums' words are lowered: ``DCGM_ERROR_ISOLATE`` is ``isolate``,
``DCGM_FR_EC_HARDWARE_MEMORY`` is ``hardware_memory``. A result file carries the
severity and category the run gave each error (``error_severity``,
``error_category``); this table names the code and fills in what a file leaves out.
New codes are added at the end of DCGM's enum, so a code above 132 is one this
table does not know: it keeps its number (``DCGM_FR_133``) and the file's severity.
"""

from __future__ import annotations

# dcgmErrorSeverity_t, by value (dcgm_errors.h).
SEVERITIES = ("none", "monitor", "isolate", "unknown", "triage", "config", "reset")
# dcgmErrorCategory_t, by value (dcgm_errors.h).
CATEGORIES = (
    "none",
    "perf_threshold",
    "perf_violation",
    "software_config",
    "software_library",
    "software_xid",
    "software_cuda",
    "software_eud",
    "software_other",
    "hardware_thermal",
    "hardware_memory",
    "hardware_nvlink",
    "hardware_nvswitch",
    "hardware_pcie",
    "hardware_power",
    "hardware_other",
    "internal_other",
)
REFERENCE = "NVIDIA DCGM dcgm_errors.h / dcgm_errors.c (DCGM 4.6.0)"

# code -> (name, severity, category)
ERRORS: dict[int, tuple[str, str, str]] = {
    0: ("DCGM_FR_OK", "unknown", "none"),
    1: ("DCGM_FR_UNKNOWN", "unknown", "none"),
    2: ("DCGM_FR_UNRECOGNIZED", "unknown", "none"),
    3: ("DCGM_FR_PCI_REPLAY_RATE", "isolate", "hardware_pcie"),
    4: ("DCGM_FR_VOLATILE_DBE_DETECTED", "isolate", "hardware_memory"),
    5: ("DCGM_FR_VOLATILE_SBE_DETECTED", "monitor", "hardware_memory"),
    6: ("DCGM_FR_PENDING_PAGE_RETIREMENTS", "reset", "hardware_memory"),
    7: ("DCGM_FR_RETIRED_PAGES_LIMIT", "isolate", "hardware_memory"),
    8: ("DCGM_FR_RETIRED_PAGES_DBE_LIMIT", "isolate", "hardware_memory"),
    9: ("DCGM_FR_CORRUPT_INFOROM", "triage", "hardware_other"),
    10: ("DCGM_FR_CLOCKS_EVENT_THERMAL", "monitor", "hardware_thermal"),
    11: ("DCGM_FR_POWER_UNREADABLE", "monitor", "hardware_power"),
    12: ("DCGM_FR_CLOCKS_EVENT_POWER", "monitor", "hardware_power"),
    13: ("DCGM_FR_NVLINK_ERROR_THRESHOLD", "isolate", "hardware_nvlink"),
    14: ("DCGM_FR_NVLINK_DOWN", "triage", "hardware_nvlink"),
    15: ("DCGM_FR_NVSWITCH_FATAL_ERROR", "isolate", "hardware_nvswitch"),
    16: ("DCGM_FR_NVSWITCH_NON_FATAL_ERROR", "monitor", "hardware_nvswitch"),
    17: ("DCGM_FR_NVSWITCH_DOWN", "monitor", "hardware_nvswitch"),
    18: ("DCGM_FR_NO_ACCESS_TO_FILE", "config", "software_other"),
    19: ("DCGM_FR_NVML_API", "monitor", "software_library"),
    20: ("DCGM_FR_DEVICE_COUNT_MISMATCH", "config", "software_other"),
    21: ("DCGM_FR_BAD_PARAMETER", "unknown", "internal_other"),
    22: ("DCGM_FR_CANNOT_OPEN_LIB", "triage", "software_library"),
    23: ("DCGM_FR_DENYLISTED_DRIVER", "config", "software_config"),
    24: ("DCGM_FR_NVML_LIB_BAD", "isolate", "software_library"),
    25: ("DCGM_FR_GRAPHICS_PROCESSES", "reset", "software_other"),
    26: ("DCGM_FR_HOSTENGINE_CONN", "monitor", "internal_other"),
    27: ("DCGM_FR_FIELD_QUERY", "monitor", "internal_other"),
    28: ("DCGM_FR_BAD_CUDA_ENV", "config", "software_cuda"),
    29: ("DCGM_FR_PERSISTENCE_MODE", "config", "software_other"),
    30: ("DCGM_FR_LOW_BANDWIDTH", "triage", "hardware_pcie"),
    31: ("DCGM_FR_HIGH_LATENCY", "triage", "hardware_pcie"),
    32: ("DCGM_FR_CANNOT_GET_FIELD_TAG", "monitor", "internal_other"),
    33: ("DCGM_FR_FIELD_VIOLATION", "isolate", "hardware_other"),
    34: ("DCGM_FR_FIELD_THRESHOLD", "monitor", "perf_violation"),
    35: ("DCGM_FR_FIELD_VIOLATION_DBL", "isolate", "perf_violation"),
    36: ("DCGM_FR_FIELD_THRESHOLD_DBL", "isolate", "perf_violation"),
    37: ("DCGM_FR_UNSUPPORTED_FIELD_TYPE", "triage", "internal_other"),
    38: ("DCGM_FR_FIELD_THRESHOLD_TS", "isolate", "perf_threshold"),
    39: ("DCGM_FR_FIELD_THRESHOLD_TS_DBL", "isolate", "perf_threshold"),
    40: ("DCGM_FR_THERMAL_VIOLATIONS", "monitor", "hardware_thermal"),
    41: ("DCGM_FR_THERMAL_VIOLATIONS_TS", "monitor", "hardware_thermal"),
    42: ("DCGM_FR_TEMP_VIOLATION", "monitor", "hardware_thermal"),
    43: ("DCGM_FR_CLOCKS_EVENT_VIOLATION", "monitor", "hardware_other"),
    44: ("DCGM_FR_INTERNAL", "triage", "internal_other"),
    45: ("DCGM_FR_PCIE_GENERATION", "triage", "hardware_pcie"),
    46: ("DCGM_FR_PCIE_WIDTH", "config", "hardware_pcie"),
    47: ("DCGM_FR_ABORTED", "config", "software_other"),
    48: ("DCGM_FR_TEST_DISABLED", "config", "software_config"),
    49: ("DCGM_FR_CANNOT_GET_STAT", "triage", "internal_other"),
    50: ("DCGM_FR_STRESS_LEVEL", "triage", "perf_threshold"),
    51: ("DCGM_FR_CUDA_API", "monitor", "software_cuda"),
    52: ("DCGM_FR_FAULTY_MEMORY", "isolate", "hardware_memory"),
    53: ("DCGM_FR_CANNOT_SET_WATCHES", "monitor", "internal_other"),
    54: ("DCGM_FR_CUDA_UNBOUND", "triage", "software_cuda"),
    55: ("DCGM_FR_ECC_DISABLED", "config", "hardware_memory"),
    56: ("DCGM_FR_MEMORY_ALLOC", "triage", "software_other"),
    57: ("DCGM_FR_CUDA_DBE", "isolate", "hardware_memory"),
    58: ("DCGM_FR_MEMORY_MISMATCH", "isolate", "hardware_memory"),
    59: ("DCGM_FR_CUDA_DEVICE", "triage", "software_cuda"),
    60: ("DCGM_FR_ECC_UNSUPPORTED", "config", "hardware_memory"),
    61: ("DCGM_FR_ECC_PENDING", "monitor", "hardware_memory"),
    62: ("DCGM_FR_MEMORY_BANDWIDTH", "triage", "perf_threshold"),
    63: ("DCGM_FR_TARGET_POWER", "triage", "hardware_power"),
    64: ("DCGM_FR_API_FAIL", "triage", "software_other"),
    65: ("DCGM_FR_API_FAIL_GPU", "triage", "software_other"),
    66: ("DCGM_FR_CUDA_CONTEXT", "triage", "software_cuda"),
    67: ("DCGM_FR_DCGM_API", "triage", "internal_other"),
    68: ("DCGM_FR_CONCURRENT_GPUS", "config", "software_config"),
    69: ("DCGM_FR_TOO_MANY_ERRORS", "monitor", "software_other"),
    70: ("DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD", "isolate", "hardware_nvlink"),
    71: ("DCGM_FR_NVLINK_ERROR_CRITICAL", "isolate", "hardware_nvlink"),
    72: ("DCGM_FR_ENFORCED_POWER_LIMIT", "config", "hardware_power"),
    73: ("DCGM_FR_MEMORY_ALLOC_HOST", "triage", "software_other"),
    74: ("DCGM_FR_GPU_OP_MODE", "monitor", "software_config"),
    75: ("DCGM_FR_NO_MEMORY_CLOCKS", "monitor", "hardware_memory"),
    76: ("DCGM_FR_NO_GRAPHICS_CLOCKS", "monitor", "hardware_other"),
    77: ("DCGM_FR_HAD_TO_RESTORE_STATE", "triage", "software_other"),
    78: ("DCGM_FR_L1TAG_UNSUPPORTED", "config", "software_other"),
    79: ("DCGM_FR_L1TAG_MISCOMPARE", "isolate", "hardware_memory"),
    80: ("DCGM_FR_ROW_REMAP_FAILURE", "reset", "hardware_memory"),
    81: ("DCGM_FR_UNCONTAINED_ERROR", "isolate", "software_xid"),
    82: ("DCGM_FR_EMPTY_GPU_LIST", "config", "software_config"),
    83: ("DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS", "reset", "hardware_memory"),
    84: ("DCGM_FR_UNCORRECTABLE_ROW_REMAP", "reset", "hardware_memory"),
    85: ("DCGM_FR_PENDING_ROW_REMAP", "reset", "hardware_memory"),
    86: ("DCGM_FR_BROKEN_P2P_MEMORY_DEVICE", "isolate", "hardware_other"),
    87: ("DCGM_FR_BROKEN_P2P_WRITER_DEVICE", "isolate", "hardware_other"),
    88: ("DCGM_FR_NVSWITCH_NVLINK_DOWN", "isolate", "hardware_nvlink"),
    89: ("DCGM_FR_EUD_BINARY_PERMISSIONS", "triage", "software_eud"),
    90: ("DCGM_FR_EUD_NON_ROOT_USER", "triage", "software_eud"),
    91: ("DCGM_FR_EUD_SPAWN_FAILURE", "triage", "software_eud"),
    92: ("DCGM_FR_EUD_TIMEOUT", "triage", "software_eud"),
    93: ("DCGM_FR_EUD_ZOMBIE", "triage", "software_eud"),
    94: ("DCGM_FR_EUD_NON_ZERO_EXIT_CODE", "triage", "software_eud"),
    95: ("DCGM_FR_EUD_TEST_FAILED", "isolate", "software_eud"),
    96: ("DCGM_FR_FILE_CREATE_PERMISSIONS", "config", "software_config"),
    97: ("DCGM_FR_PAUSE_RESUME_FAILED", "triage", "internal_other"),
    98: ("DCGM_FR_PCIE_H_REPLAY_VIOLATION", "isolate", "hardware_pcie"),
    99: ("DCGM_FR_GPU_EXPECTED_NVLINKS_UP", "triage", "hardware_nvlink"),
    100: ("DCGM_FR_NVSWITCH_EXPECTED_NVLINKS_UP", "triage", "hardware_nvlink"),
    101: ("DCGM_FR_XID_ERROR", "triage", "software_xid"),
    102: ("DCGM_FR_SBE_VIOLATION", "isolate", "hardware_memory"),
    103: ("DCGM_FR_DBE_VIOLATION", "isolate", "hardware_memory"),
    104: ("DCGM_FR_PCIE_REPLAY_VIOLATION", "isolate", "hardware_pcie"),
    105: ("DCGM_FR_SBE_THRESHOLD_VIOLATION", "isolate", "hardware_memory"),
    106: ("DCGM_FR_DBE_THRESHOLD_VIOLATION", "isolate", "hardware_memory"),
    107: ("DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION", "isolate", "hardware_pcie"),
    108: ("DCGM_FR_CUDA_FM_NOT_INITIALIZED", "monitor", "software_cuda"),
    109: ("DCGM_FR_SXID_ERROR", "isolate", "software_xid"),
    110: ("DCGM_FR_GFLOPS_THRESHOLD_VIOLATION", "triage", "perf_violation"),
    111: ("DCGM_FR_NAN_VALUE", "isolate", "hardware_memory"),
    112: ("DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR", "config", "software_cuda"),
    113: ("DCGM_FR_BROKEN_P2P_PCIE_MEMORY_DEVICE", "isolate", "hardware_pcie"),
    114: ("DCGM_FR_BROKEN_P2P_PCIE_WRITER_DEVICE", "isolate", "hardware_pcie"),
    115: ("DCGM_FR_BROKEN_P2P_NVLINK_MEMORY_DEVICE", "isolate", "hardware_nvlink"),
    116: ("DCGM_FR_BROKEN_P2P_NVLINK_WRITER_DEVICE", "isolate", "hardware_nvlink"),
    117: ("DCGM_FR_TEST_SKIPPED", "config", "software_config"),
    118: ("DCGM_FR_SRAM_THRESHOLD", "isolate", "hardware_memory"),
    119: ("DCGM_FR_NVLINK_EFFECTIVE_BER_THRESHOLD", "isolate", "hardware_nvlink"),
    120: ("DCGM_FR_FALLEN_OFF_BUS", "isolate", "hardware_other"),
    121: ("DCGM_FR_NVLINK_SYMBOL_BER_THRESHOLD", "isolate", "hardware_nvlink"),
    122: ("DCGM_FR_IMEX_UNHEALTHY", "isolate", "software_other"),
    123: ("DCGM_FR_FABRIC_PROBE_STATE", "monitor", "hardware_nvlink"),
    124: ("DCGM_FR_BINARY_PERMISSIONS", "triage", "software_other"),
    125: ("DCGM_FR_GPU_RECOVERY_RESET", "reset", "hardware_other"),
    126: ("DCGM_FR_GPU_RECOVERY_REBOOT", "isolate", "hardware_other"),
    127: ("DCGM_FR_GPU_RECOVERY_DRAIN_P2P", "reset", "hardware_other"),
    128: ("DCGM_FR_GPU_RECOVERY_DRAIN_RESET", "reset", "hardware_other"),
    129: ("DCGM_FR_NCCL_ERROR", "reset", "hardware_other"),
    130: ("DCGM_FR_RETEST_REQUESTED", "triage", "software_other"),
    131: ("DCGM_FR_CONTAINED_ERROR", "monitor", "software_xid"),
    132: ("DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT", "triage", "hardware_memory"),
}


def name(code: int) -> str:
    """``DCGM_FR_FAULTY_MEMORY`` for 52; ``DCGM_FR_<n>`` for a code the table does not know."""
    row = ERRORS.get(code)
    return row[0] if row else f"DCGM_FR_{code}"


def severity(value: object, code: int) -> str:
    """The severity word of a file's ``error_severity`` (an int), else the table's for ``code``.

    A value outside DCGM's enum is ``unknown`` (what DCGM calls a code it does not know).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return SEVERITIES[value] if 0 <= value < len(SEVERITIES) else "unknown"
    row = ERRORS.get(code)
    return row[1] if row else "unknown"


def category(value: object, code: int) -> str:
    """The category word of a file's ``error_category`` (an int), else the table's for ``code``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return CATEGORIES[value] if 0 <= value < len(CATEGORIES) else "none"
    row = ERRORS.get(code)
    return row[2] if row else "none"
