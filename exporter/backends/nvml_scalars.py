"""What the NVML reader reads, as tables: one-number calls, memory families, field ids.

Data :class:`exporter.backends.nvml_device.DeviceReader` binds once per worker
and walks every poll; each row names the pynvml function, its extra arguments,
the family, the dimension label, the scale to base units and the largest valid
value.
"""

from __future__ import annotations

from typing import Any

from exporter.backends import nvml_support as nv
from exporter.family_names import (
    ACCEL_CLOCK_HERTZ,
    ACCEL_CLOCK_MAX_HERTZ,
    ACCEL_CLOCK_VIOLATION_SECONDS_TOTAL,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_RESERVED_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_MIG_MEMORY_FREE_BYTES,
    ACCEL_MIG_MEMORY_TOTAL_BYTES,
    ACCEL_MIG_MEMORY_USED_BYTES,
    ACCEL_NVLINK_RX_BYTES_TOTAL,
    ACCEL_NVLINK_TX_BYTES_TOTAL,
    ACCEL_PCIE_LINK_GENERATION,
    ACCEL_PCIE_LINK_MAX_GENERATION,
    ACCEL_PCIE_LINK_MAX_WIDTH,
    ACCEL_PCIE_LINK_WIDTH,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_PCIE_RX_BYTES_PER_SECOND,
    ACCEL_PCIE_TX_BYTES_PER_SECOND,
    ACCEL_PERFORMANCE_STATE,
    ACCEL_POWER_LIMIT_WATTS,
    ACCEL_POWER_WATTS,
    ACCEL_RETIRED_PAGES_PENDING,
    ACCEL_TEMPERATURE_CELSIUS,
)

# Returned by DeviceReader._newer: read this GPU with the older entry point.
OLDER = object()

# To base units: (multiply by, divide by), one of them 1. A division is exact where
# multiplying by 1e-3 is not (250123 mW * 1e-3 = 250.12300000000002 W); an integer
# multiplication keeps integral values ints, which JSON writes and reads faster.
Scale = tuple[int, int]
ONE: Scale = (1, 1)
KIB: Scale = (1024, 1)
MHZ: Scale = (1_000_000, 1)
MILLI: Scale = (1, 1000)
NANO: Scale = (1, 1_000_000_000)

# (pynvml function, extra arguments, family, dimension label, scale to base units,
# largest valid value): the calls that read one number each.
Scalar = tuple[str, tuple[int, ...], str, str, Scale, float]
BoundScalar = tuple[Any, tuple[int, ...], str, str, Scale, float]
ANY = float("inf")
FAST_SCALARS: tuple[Scalar, ...] = (
    ("nvmlDeviceGetPowerUsage", (), ACCEL_POWER_WATTS, "", MILLI, ANY),  # mW
    ("nvmlDeviceGetEnforcedPowerLimit", (), ACCEL_POWER_LIMIT_WATTS, "", MILLI, ANY),
    ("nvmlDeviceGetTotalEnergyConsumption", (), ACCEL_ENERGY_JOULES_TOTAL, "", MILLI, ANY),  # mJ
    *(
        ("nvmlDeviceGetClockInfo", (clock,), ACCEL_CLOCK_HERTZ, name, MHZ, ANY)
        for clock, name in nv.CLOCKS
    ),
    ("nvmlDeviceGetPerformanceState", (), ACCEL_PERFORMANCE_STATE, "", ONE, 15),  # 32: unknown
    # KB/s of 1024 bytes
    ("nvmlDeviceGetPcieThroughput", (0,), ACCEL_PCIE_TX_BYTES_PER_SECOND, "", KIB, ANY),
    ("nvmlDeviceGetPcieThroughput", (1,), ACCEL_PCIE_RX_BYTES_PER_SECOND, "", KIB, ANY),
    ("nvmlDeviceGetPcieReplayCounter", (), ACCEL_PCIE_REPLAYS_TOTAL, "", ONE, ANY),
    ("nvmlDeviceGetCurrPcieLinkGeneration", (), ACCEL_PCIE_LINK_GENERATION, "", ONE, ANY),
    ("nvmlDeviceGetCurrPcieLinkWidth", (), ACCEL_PCIE_LINK_WIDTH, "", ONE, ANY),
)
SLOW_SCALARS: tuple[Scalar, ...] = (
    *(
        ("nvmlDeviceGetMaxClockInfo", (clock,), ACCEL_CLOCK_MAX_HERTZ, name, MHZ, ANY)
        for clock, name in nv.CLOCKS
    ),
    ("nvmlDeviceGetMaxPcieLinkGeneration", (), ACCEL_PCIE_LINK_MAX_GENERATION, "", ONE, ANY),
    ("nvmlDeviceGetMaxPcieLinkWidth", (), ACCEL_PCIE_LINK_MAX_WIDTH, "", ONE, ANY),
    ("nvmlDeviceGetRetiredPagesPendingStatus", (), ACCEL_RETIRED_PAGES_PENDING, "", ONE, 1),
)
MEMORY = (
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_RESERVED_BYTES,
)
MIG_MEMORY = (
    ACCEL_MIG_MEMORY_TOTAL_BYTES,
    ACCEL_MIG_MEMORY_USED_BYTES,
    ACCEL_MIG_MEMORY_FREE_BYTES,
    "",
)
# Field id -> (family, dimension label or "" for the NVLink link in scopeId, scale to base units).
FIELD_SPECS: dict[int, tuple[str, str, Scale]] = {
    nv.FI_MEMORY_TEMP: (ACCEL_TEMPERATURE_CELSIUS, "memory", ONE),
    nv.FI_NVLINK_THROUGHPUT_DATA_TX: (ACCEL_NVLINK_TX_BYTES_TOTAL, "", KIB),
    nv.FI_NVLINK_THROUGHPUT_DATA_RX: (ACCEL_NVLINK_RX_BYTES_TOTAL, "", KIB),
    **{fid: (ACCEL_CLOCK_VIOLATION_SECONDS_TOTAL, name, NANO) for fid, name in nv.VIOLATION_FIELDS},
}
