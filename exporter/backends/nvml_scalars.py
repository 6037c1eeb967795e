"""What the NVML reader reads, as tables: one-number calls, memory families, field ids.

Data :class:`exporter.backends.nvml_device.DeviceReader` binds once per worker
and walks every poll; each row names the pynvml function, its extra arguments,
the family, the dimension label, the scale to base units and the largest valid
value.
"""

from __future__ import annotations

from typing import Any

from exporter.backends import nvml_support as nv

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
    ("nvmlDeviceGetPowerUsage", (), "accel_power_watts", "", MILLI, ANY),  # mW
    ("nvmlDeviceGetEnforcedPowerLimit", (), "accel_power_limit_watts", "", MILLI, ANY),
    ("nvmlDeviceGetTotalEnergyConsumption", (), "accel_energy_joules_total", "", MILLI, ANY),  # mJ
    *(
        ("nvmlDeviceGetClockInfo", (clock,), "accel_clock_hertz", name, MHZ, ANY)
        for clock, name in nv.CLOCKS
    ),
    ("nvmlDeviceGetPerformanceState", (), "accel_performance_state", "", ONE, 15),  # 32: unknown
    # KB/s of 1024 bytes
    ("nvmlDeviceGetPcieThroughput", (0,), "accel_pcie_tx_bytes_per_second", "", KIB, ANY),
    ("nvmlDeviceGetPcieThroughput", (1,), "accel_pcie_rx_bytes_per_second", "", KIB, ANY),
    ("nvmlDeviceGetPcieReplayCounter", (), "accel_pcie_replays_total", "", ONE, ANY),
    ("nvmlDeviceGetCurrPcieLinkGeneration", (), "accel_pcie_link_generation", "", ONE, ANY),
    ("nvmlDeviceGetCurrPcieLinkWidth", (), "accel_pcie_link_width", "", ONE, ANY),
)
SLOW_SCALARS: tuple[Scalar, ...] = (
    *(
        ("nvmlDeviceGetMaxClockInfo", (clock,), "accel_clock_max_hertz", name, MHZ, ANY)
        for clock, name in nv.CLOCKS
    ),
    ("nvmlDeviceGetMaxPcieLinkGeneration", (), "accel_pcie_link_max_generation", "", ONE, ANY),
    ("nvmlDeviceGetMaxPcieLinkWidth", (), "accel_pcie_link_max_width", "", ONE, ANY),
    ("nvmlDeviceGetRetiredPagesPendingStatus", (), "accel_retired_pages_pending", "", ONE, 1),
)
MEMORY = (
    "accel_memory_total_bytes",
    "accel_memory_used_bytes",
    "accel_memory_free_bytes",
    "accel_memory_reserved_bytes",
)
MIG_MEMORY = (
    "accel_mig_memory_total_bytes",
    "accel_mig_memory_used_bytes",
    "accel_mig_memory_free_bytes",
    "",
)
# Field id -> (family, dimension label or "" for the NVLink link in scopeId, scale to base units).
FIELD_SPECS: dict[int, tuple[str, str, Scale]] = {
    nv.FI_MEMORY_TEMP: ("accel_temperature_celsius", "memory", ONE),
    nv.FI_NVLINK_THROUGHPUT_DATA_TX: ("accel_nvlink_tx_bytes_total", "", KIB),
    nv.FI_NVLINK_THROUGHPUT_DATA_RX: ("accel_nvlink_rx_bytes_total", "", KIB),
    **{
        fid: ("accel_clock_violation_seconds_total", name, NANO)
        for fid, name in nv.VIOLATION_FIELDS
    },
}
