"""The AMD GPU fields read at the slow poll: ECC counts, power and temperature limits, partition.

Runs inside the worker process, through the same :class:`DeviceReader` as the fast
fields (exporter.backends.amdsmi_fields): these change rarely or cost more to read,
so :mod:`exporter.backends.amdsmi` reads them at the slow poll only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from exporter.backends.amdsmi_fields import ECC_TOTALS, MICRO_PER_UNIT, DeviceReader
from exporter.backends.contract import U16_MAX, U32_MAX, U64_MAX, number
from exporter.family_names import (
    ACCEL_AMD_ECC_CORRECTABLE_ERRORS_TOTAL,
    ACCEL_AMD_ECC_DEFERRED_ERRORS_TOTAL,
    ACCEL_AMD_ECC_UNCORRECTABLE_ERRORS_TOTAL,
    ACCEL_AMD_PARTITION_ID,
    ACCEL_AMD_POWER_CAP_WATTS,
    ACCEL_AMD_TEMPERATURE_LIMIT_CELSIUS,
    ACCEL_ECC_ERRORS_TOTAL,
)


def read_ecc(r: DeviceReader, blocks: Iterable[tuple[str, Any]]) -> None:
    """ECC totals (shared family) and per RAS block (AMD families) for enabled blocks."""
    total = r.call("ecc_total", r.api.amdsmi_get_gpu_total_ecc_count)
    if total is not None:
        for key, kind in ECC_TOTALS:
            # counter="" : AMD has no volatile/aggregate split.
            r.add(ACCEL_ECC_ERRORS_TOTAL, number(total.get(key), U64_MAX), kind, "")
    enabled = r.call("ecc_enabled", r.api.amdsmi_get_gpu_ecc_enabled)
    if not isinstance(enabled, int):
        return
    for label, block in blocks:
        if not enabled & int(block):
            continue
        counts = r.call("ecc_block", r.api.amdsmi_get_gpu_ecc_count, block)
        if counts is None:
            continue
        for key, metric in (
            ("correctable_count", ACCEL_AMD_ECC_CORRECTABLE_ERRORS_TOTAL),
            ("uncorrectable_count", ACCEL_AMD_ECC_UNCORRECTABLE_ERRORS_TOTAL),
            ("deferred_count", ACCEL_AMD_ECC_DEFERRED_ERRORS_TOTAL),
        ):
            r.add(metric, number(counts.get(key), U64_MAX), label)


def read_limits(r: DeviceReader) -> None:
    """Power cap range and default (uW -> W), temperature limits of each sensor."""
    cap = r.call("power_cap", r.api.amdsmi_get_power_cap_info)
    if cap is not None:
        for key, bound in (
            ("min_power_cap", "min"),
            ("max_power_cap", "max"),
            ("default_power_cap", "default"),
        ):
            uw = number(cap.get(key), U64_MAX)
            r.add(ACCEL_AMD_POWER_CAP_WATTS, None if uw is None else uw / MICRO_PER_UNIT, bound)
    for metric, limit in r.api.temperature_limits:
        for kind, sensor in r.api.temperatures:
            value = r.call("temperature_limit", r.api.amdsmi_get_temp_metric, kind, metric)
            value = number(value, U16_MAX, U32_MAX)
            # 0 is what a sensor without the limit reports.
            r.add(ACCEL_AMD_TEMPERATURE_LIMIT_CELSIUS, value or None, sensor, limit)


def read_partition(r: DeviceReader) -> None:
    """Which partition of its physical GPU this device is."""
    kfd = r.call("kfd_info", r.api.amdsmi_get_gpu_kfd_info)
    if kfd is not None:
        r.add(ACCEL_AMD_PARTITION_ID, number(kfd.get("current_partition_id"), U32_MAX))
