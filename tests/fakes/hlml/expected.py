"""What the hlml backend must report for a fake Gaudi device, computed from its state."""

from __future__ import annotations

from typing import Any

from exporter.catalog.device import INFO_LABELS
from tests.fakes.hlml.control import NIC_STAT_NAMES, PORTS, SERVED_SENSORS, Device, bdf, uuid
from tests.helpers.backend_harness import Series, key


def series(dev: Device, i: int, *, device: str | None = None) -> Series:
    """Every series of device ``i`` (slow ones included), keyed like samples()."""
    me: dict[str, Any] = {"device": device if device is not None else str(i), "uuid": uuid(i)}
    out: Series = {
        key("accel_utilization_ratio", **me): dev.util_aip / 100,
        key("accel_gaudi_memory_utilization_ratio", **me): dev.util_memory / 100,
        key("accel_memory_total_bytes", **me): dev.mem_total,
        key("accel_memory_used_bytes", **me): dev.mem_used,
        key("accel_memory_free_bytes", **me): dev.mem_free,
        key("accel_power_watts", **me): dev.power_mw / 1000,
        key("accel_power_limit_watts", **me): dev.power_limit_mw / 1000,
        key("accel_energy_joules_total", **me): dev.energy_mj / 1000,
        key("accel_clock_hertz", clock="soc", **me): dev.clock_mhz * 1e6,
        key("accel_clock_max_hertz", clock="soc", **me): dev.clock_max_mhz * 1e6,
        key("accel_pcie_replays_total", **me): dev.pcie_replay,
        key("accel_pcie_link_generation", **me): dev.pcie_gen,
        key("accel_pcie_link_width", **me): dev.pcie_width,
        key("accel_gaudi_row_replacement_pending", **me): dev.rows_pending,
    }
    for sensor, label in SERVED_SENSORS.items():
        out[key("accel_temperature_celsius", sensor=label, **me)] = dev.temp[sensor]
    for bit, reason in ((1, "power"), (2, "thermal")):
        out[key("accel_clock_throttle_active", reason=reason, **me)] = (
            1 if dev.throttle & bit else 0
        )
    for policy, reason in ((0, "power"), (1, "thermal")):
        out[key("accel_clock_violation_seconds_total", reason=reason, **me)] = (
            dev.violation_ns[policy] / 1e9
        )
    for t, type_name in enumerate(("corrected", "uncorrected")):
        for c, counter in enumerate(("volatile", "aggregate")):
            labels = {"type": type_name, "counter": counter, **me}
            out[key("accel_ecc_errors_total", **labels)] = dev.ecc[t][c]
    for cause, name in enumerate(("multiple_single_bit_ecc", "double_bit_ecc")):
        out[key("accel_gaudi_replaced_rows", cause=name, **me)] = dev.replaced_rows[cause]
    for port in range(PORTS):
        up = (dev.port_up[0] >> port) & 1
        out[key("accel_gaudi_nic_port_up", port=str(port), **me)] = up
        for k, name in enumerate(NIC_STAT_NAMES):
            labels = {"port": str(port), "counter": name, **me}
            out[key("accel_gaudi_nic_statistic_total", **labels)] = dev.nic_stat[k] + port
    return {k: float(v) for k, v in out.items()}


def info(dev: Device, i: int) -> dict[str, str]:
    """accel_device_info labels of device ``i`` (those the backend leaves empty too)."""
    return {
        **dict.fromkeys(INFO_LABELS, ""),
        "vendor": "intel_gaudi",
        "device": str(i),
        "uuid": uuid(i),
        "model": dev.name.decode(),
        "pci_bus_id": bdf(i),
        "serial": dev.serial.decode(),
        "driver_version": "1.24.2-a7d6ed4",
    }
