"""A source with fixed device-like readings, for ``launch.py --extra-sources``.

``FIXED_SOURCE_INTERVAL`` (seconds, default 3600) sets its poll interval: long
for tests that want the store to stand still after the first poll, short for
tests that watch the poll schedule.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from exporter.config.source import SourceConfig
from exporter.model import Reading
from exporter.sources.base import Source

GPU = ("0", "GPU-8c5a0c1e-0000-4000-8000-000000000001")
GPU2 = ("1", "GPU-8c5a0c1e-0000-4000-8000-000000000002")

READINGS = (
    Reading(
        "accel_device_info",
        (
            "nvidia",
            *GPU[:1],
            GPU[1],
            "NVIDIA H100 80GB HBM3",
            "00000000:18:00.0",
            "1650123456789",
            "96.00.99.00.01",
            "570.86.15",
            "12.8",
            "disabled",
            "",
            "",
        ),
        1.0,
    ),
    Reading("accel_devices", ("nvidia",), 2.0),
    Reading("accel_device_up", GPU, 1.0),
    Reading("accel_device_up", GPU2, 0.0),
    Reading("accel_device_down_reason_info", (*GPU2, "gpu_lost"), 1.0),
    Reading("accel_utilization_ratio", GPU, 0.75),
    Reading("accel_encoder_utilization_ratio", GPU, 0.125),
    Reading("accel_decoder_utilization_ratio", GPU, 0.0),
    Reading("accel_memory_total_bytes", GPU, 85899345920.0),
    Reading("accel_memory_used_bytes", GPU, 4294967296.0),
    Reading("accel_memory_free_bytes", GPU, 81604378624.0),
    Reading("accel_temperature_celsius", (*GPU, "gpu"), 41.0),
    Reading("accel_temperature_celsius", (*GPU, "memory"), 38.5),
    Reading("accel_power_watts", GPU, 312.25),
    Reading("accel_energy_joules_total", GPU, 123456789.5),
    Reading("accel_clock_hertz", (*GPU, "sm"), 1980000000.0),
    Reading("accel_pcie_tx_bytes_per_second", GPU, 1.5e9),
    Reading("accel_pcie_rx_bytes_per_second", GPU, 2.5e9),
    Reading("accel_ecc_errors_total", (*GPU, "corrected", "volatile"), 3.0),
    Reading("accel_ecc_errors_total", (*GPU, "uncorrected", "aggregate"), 0.0),
)


class FixedSource(Source):
    """Returns the same readings on every poll."""

    def __init__(self, interval: float) -> None:
        super().__init__("fixed", SourceConfig(enabled=True, interval=interval))

    async def poll(self) -> Sequence[Reading]:
        return READINGS


def sources(config: object) -> list[Source]:
    return [FixedSource(float(os.environ.get("FIXED_SOURCE_INTERVAL", "3600")))]
