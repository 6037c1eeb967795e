"""What the levelzero backend must report for a fake device, computed from its state.

Only the series whose value does not depend on how many polls happened: the
moving counters (energy, memory and fabric bytes) are checked by the tests
against the fake's step arithmetic instead.
"""

from __future__ import annotations

from typing import Any

from exporter.catalog.device import INFO_LABELS
from tests.fakes.levelzero.control import CLOCKS, ENGINES, SENSORS, Device, uuid
from tests.helpers.backend_harness import Series, key

THROTTLE_REASONS = [
    "ave_pwr_cap",
    "burst_pwr_cap",
    "current_limit",
    "thermal_limit",
    "psu_alert",
    "sw_range",
    "hw_range",
    "voltage",
    "thermal",
    "power",
]
# The fake's sensor names the exporter writes otherwise (as every vendor does).
SENSOR_LABELS = {"gpu_board": "board"}
# The fake's frequency domains -> the clock label every vendor uses for them.
CLOCK_LABELS = {"gpu": "graphics", "memory": "memory", "media": "video"}
RAS = ("reset", "programming", "driver", "compute", "non_compute", "cache", "display")


def series(dev: Device, i: int, *, device: str | None = None) -> Series:
    """Every steady series of device ``i`` (slow ones included), keyed like samples()."""
    me: dict[str, Any] = {"device": device if device is not None else str(i), "uuid": uuid(i)}
    out: Series = {}
    tiles = 2 if dev.tiles else 1
    engine = {
        name: sum(dev.engine_step[t][kind] for t in range(tiles)) / tiles / dev.engine_ts_step
        for name, kind in ENGINES.items()
    }
    for name, ratio in engine.items():
        out[key("accel_intel_engine_utilization_ratio", engine=name, **me)] = ratio
    out[key("accel_utilization_ratio", **me)] = engine["compute"]
    total = sum(dev.mem_size[t] for t in range(tiles))
    free = sum(dev.mem_free[t] for t in range(tiles))
    out[key("accel_memory_total_bytes", **me)] = total
    out[key("accel_memory_free_bytes", **me)] = free
    out[key("accel_memory_used_bytes", **me)] = total - free
    out[key("accel_power_watts", **me)] = dev.energy_step_uj / dev.energy_ts_step_us
    for name, kind in SENSORS.items():
        sensor = SENSOR_LABELS.get(name, name)
        out[key("accel_temperature_celsius", sensor=sensor, **me)] = dev.temp[kind]
    for name, kind in CLOCKS.items():
        clock = CLOCK_LABELS[name]
        out[key("accel_clock_hertz", clock=clock, **me)] = dev.freq_actual[kind] * 1e6
        out[key("accel_clock_max_hertz", clock=clock, **me)] = dev.freq_max[kind] * 1e6
    for bit, reason in enumerate(THROTTLE_REASONS):
        active = 1.0 if dev.throttle[0] & (1 << bit) else 0.0
        out[key("accel_clock_throttle_active", reason=reason, **me)] = active
    seconds = dev.pci_ts_step / 1e6
    out[key("accel_pcie_rx_bytes_per_second", **me)] = dev.pci_rx_step / seconds
    out[key("accel_pcie_tx_bytes_per_second", **me)] = dev.pci_tx_step / seconds
    out[key("accel_pcie_replays_total", **me)] = dev.pci_replay
    out[key("accel_pcie_link_generation", **me)] = dev.pci_gen
    out[key("accel_pcie_link_width", **me)] = dev.pci_width
    out[key("accel_pcie_link_max_generation", **me)] = dev.pci_max_gen
    out[key("accel_pcie_link_max_width", **me)] = dev.pci_max_width
    out[key("accel_intel_memory_health", **me)] = dev.mem_health
    out[key("accel_intel_reset_required", **me)] = 0.0
    for kind, family in enumerate(("correctable", "uncorrectable")):
        for c, name in enumerate(RAS):
            metric = f"accel_intel_ras_{family}_errors_total"
            out[key(metric, category=name, **me)] = dev.ras[kind][c]
    for kind, type_name in enumerate(("corrected", "uncorrected")):
        labels = {"type": type_name, "counter": "", **me}
        out[key("accel_ecc_errors_total", **labels)] = dev.ras_memory[kind]
    for p in range(dev.fabric_ports):
        port = f"{i + 1}.0.{p + 1}"
        out[key("accel_intel_fabric_port_up", port=port, **me)] = (
            1.0 if dev.port_status[p] in (1, 2) else 0.0
        )
    return {k: float(v) for k, v in out.items()}


def info(dev: Device, i: int) -> dict[str, str]:
    """accel_device_info labels of device ``i`` (those the backend leaves empty too)."""
    return {
        **dict.fromkeys(INFO_LABELS, ""),
        "vendor": "intel",
        "device": str(i),
        "uuid": uuid(i),
        "model": dev.model.decode(),
        "pci_bus_id": f"0000:{dev.pci_bus:02x}:00.0",
        "serial": dev.serial.decode(),
        "driver_version": dev.driver.decode(),
    }
