"""Per-device totals of the families that have one row per link or port.

An 8-GPU NVLink node has 144 links; four error counters and three traffic
families per link are 1,000 series, most of them zero or of interest only when
a link misbehaves. The ``default`` and ``minimal`` profiles
(:mod:`exporter.catalog.profiles`) export these per-device sums instead; the
per-link rows stay available in ``full`` or through ``include``. A total is
derived from the per-link readings while rendering (no source reports it), so
it is exactly their sum in every profile, and a counter's total is as monotonic
as its links.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog import budget
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import NVLINK_ERRORS

ID = ("device", "uuid")


@dataclass(frozen=True)
class Total:
    """``row`` is ``detail`` summed over its ``over`` label (the other labels kept)."""

    row: MetricSpec
    detail: str
    over: str


TOTALS: tuple[Total, ...] = (
    Total(
        MetricSpec(
            "accel_nvlink_device_errors_total",
            Kind.COUNTER,
            "NVLink data-link errors of every link of the GPU, by type (the sum of"
            " accel_nvlink_errors_total over links).",
            (*ID, "type"),
            otel_unit="{error}",
            values={"type": NVLINK_ERRORS},
            max_series=budget.DEVICES,
        ),
        "accel_nvlink_errors_total",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_nvlink_device_tx_bytes_total",
            Kind.COUNTER,
            "Data bytes transmitted over every NVLink link of the GPU (the sum of"
            " accel_nvlink_tx_bytes_total over links).",
            ID,
            unit="bytes",
            max_series=budget.DEVICES,
        ),
        "accel_nvlink_tx_bytes_total",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_nvlink_device_rx_bytes_total",
            Kind.COUNTER,
            "Data bytes received over every NVLink link of the GPU (the sum of"
            " accel_nvlink_rx_bytes_total over links).",
            ID,
            unit="bytes",
            max_series=budget.DEVICES,
        ),
        "accel_nvlink_rx_bytes_total",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_nvlink_links_up",
            Kind.GAUGE,
            "NVLink links of the GPU that are active (the sum of accel_nvlink_up over links).",
            ID,
            otel_unit="{link}",
            max_series=budget.DEVICES,
        ),
        "accel_nvlink_up",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_amd_xgmi_device_read_bytes_total",
            Kind.COUNTER,
            "Data read over every XGMI link of the GPU (the sum of"
            " accel_amd_xgmi_read_bytes_total over links).",
            ID,
            unit="bytes",
            max_series=budget.DEVICES,
        ),
        "accel_amd_xgmi_read_bytes_total",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_amd_xgmi_device_write_bytes_total",
            Kind.COUNTER,
            "Data written over every XGMI link of the GPU (the sum of"
            " accel_amd_xgmi_write_bytes_total over links).",
            ID,
            unit="bytes",
            max_series=budget.DEVICES,
        ),
        "accel_amd_xgmi_write_bytes_total",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_amd_xgmi_links_up",
            Kind.GAUGE,
            "XGMI links of the GPU that are up (the sum of accel_amd_xgmi_link_up over links).",
            ID,
            otel_unit="{link}",
            max_series=budget.DEVICES,
        ),
        "accel_amd_xgmi_link_up",
        "link",
    ),
    Total(
        MetricSpec(
            "accel_intel_fabric_ports_up",
            Kind.GAUGE,
            "Xe Link fabric ports of the GPU that are up (the sum of accel_intel_fabric_port_up"
            " over ports).",
            ID,
            otel_unit="{port}",
            max_series=budget.DEVICES,
        ),
        "accel_intel_fabric_port_up",
        "port",
    ),
    Total(
        MetricSpec(
            "accel_intel_fabric_device_rx_bytes_total",
            Kind.COUNTER,
            "Bytes received over every fabric port of the GPU (the sum of"
            " accel_intel_fabric_rx_bytes_total over ports).",
            ID,
            unit="bytes",
            max_series=budget.DEVICES,
        ),
        "accel_intel_fabric_rx_bytes_total",
        "port",
    ),
    Total(
        MetricSpec(
            "accel_intel_fabric_device_tx_bytes_total",
            Kind.COUNTER,
            "Bytes transmitted over every fabric port of the GPU (the sum of"
            " accel_intel_fabric_tx_bytes_total over ports).",
            ID,
            unit="bytes",
            max_series=budget.DEVICES,
        ),
        "accel_intel_fabric_tx_bytes_total",
        "port",
    ),
    Total(
        MetricSpec(
            "accel_gaudi_nic_ports_up",
            Kind.GAUGE,
            "NIC ports of the Gaudi device that are up (the sum of accel_gaudi_nic_port_up over"
            " ports).",
            ID,
            otel_unit="{port}",
            max_series=budget.DEVICES,
        ),
        "accel_gaudi_nic_port_up",
        "port",
    ),
    Total(
        MetricSpec(
            "accel_gaudi_nic_device_statistic_total",
            Kind.COUNTER,
            "A NIC counter summed over every port of the Gaudi device (the sum of"
            " accel_gaudi_nic_statistic_total over ports), by the driver's name.",
            (*ID, "counter"),
            otel_unit="{count}",
            max_series=budget.DEVICE_PARTS,
        ),
        "accel_gaudi_nic_statistic_total",
        "port",
    ),
)

ROWS = tuple(total.row for total in TOTALS)
