"""The amdsmi package as the AMD backend uses it, resolved once at bootstrap.

amdsmi releases differ in the functions and enum members they offer (the
``amd`` extra allows 6.4 and later; the package must match the node's ROCm).
Every function the backend calls is looked up here: one the package lacks
answers NOT_SUPPORTED, like a device without the field. The enum members the
readers iterate (temperature sensors, clock domains, memory pools) are kept
only when the package has them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from exporter.backends.amdsmi_fields import (
    CLOCKS,
    MEMORY_POOLS,
    TEMPERATURE_LIMITS,
    TEMPERATURES,
)
from exporter.backends.binding import Binding

# Every amdsmi function the backend calls (tests/unit/test_amdsmi_fields.py checks
# the backend's sources against this list).
FUNCTIONS = (
    "amdsmi_init",
    "amdsmi_shut_down",
    "amdsmi_get_lib_version",
    "amdsmi_get_processor_handles",
    "amdsmi_get_socket_handles",
    "amdsmi_get_socket_info",
    "amdsmi_get_processor_type",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_board_info",
    "amdsmi_get_xgmi_info",
    "amdsmi_get_gpu_vbios_info",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_compute_partition",
    "amdsmi_get_gpu_memory_partition",
    "amdsmi_get_gpu_kfd_info",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_gpu_memory_total",
    "amdsmi_get_gpu_memory_usage",
    "amdsmi_get_temp_metric",
    "amdsmi_get_power_info",
    "amdsmi_get_power_cap_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_clock_info",
    "amdsmi_get_gpu_fan_speed",
    "amdsmi_get_gpu_fan_speed_max",
    "amdsmi_get_pcie_info",
    "amdsmi_get_gpu_metrics_info",
    "amdsmi_get_violation_status",
    "amdsmi_get_gpu_process_list",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_gpu_ecc_enabled",
    "amdsmi_get_gpu_ecc_count",
    "amdsmi_get_gpu_bad_page_info",
    "amdsmi_get_gpu_bad_page_threshold",
)


def members(enum: Any, names: Iterable[str]) -> dict[str, Any]:
    """The members of ``enum`` among ``names``, by name (an older package lacks some)."""
    table = getattr(enum, "__members__", {})
    return {name: table[name] for name in names if name in table}


class AmdBinding(Binding):
    """amdsmi with every function guaranteed, plus the enum tables the readers use."""

    def __init__(self, module: Any) -> None:
        def absent(name: str) -> Callable[..., Any]:
            def call(*_args: Any, **_kwargs: Any) -> Any:
                raise module.AmdSmiLibraryException(
                    module.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED
                )

            call.__name__ = name
            return call

        super().__init__(module, FUNCTIONS, absent)
        self.status_names: dict[int, str] = dict(module.amdsmi_wrapper.amdsmi_status_t__enumvalues)
        sensors = members(getattr(module, "AmdSmiTemperatureType", None), dict(TEMPERATURES))
        clocks = members(getattr(module, "AmdSmiClkType", None), dict(CLOCKS))
        pools = members(getattr(module, "AmdSmiMemoryType", None), (k for k, *_ in MEMORY_POOLS))
        metric = getattr(module, "AmdSmiTemperatureMetric", None)
        # (member, label) of each sensor, clock domain; (member, total, used) of each pool.
        self.temperatures = tuple((sensors[n], label) for n, label in TEMPERATURES if n in sensors)
        self.temperature_current: Any = getattr(metric, "CURRENT", None)
        limits = members(metric, dict(TEMPERATURE_LIMITS))
        self.temperature_limits = tuple(
            (limits[n], label) for n, label in TEMPERATURE_LIMITS if n in limits
        )
        self.clocks = tuple((clocks[n], label) for n, label in CLOCKS if n in clocks)
        self.memory_pools = tuple(
            (pools[kind], total, used) for kind, total, used in MEMORY_POOLS if kind in pools
        )
        self.vram = pools.get("VRAM")
        self.lacking = [
            *self.missing,
            *(f"AmdSmiTemperatureType.{n}" for n, _ in TEMPERATURES if n not in sensors),
            *(f"AmdSmiClkType.{n}" for n, _ in CLOCKS if n not in clocks),
            *(f"AmdSmiMemoryType.{k}" for k, *_ in MEMORY_POOLS if k not in pools),
        ]
