"""Intel Gaudi families (HLML): quantities the shared names do not cover.

Shared quantities (utilization, memory, temperatures, power, energy, clocks,
ECC, PCIe link, throttle reasons and violation time) use the names in
``device.py``. Every series here carries the identity labels ``device`` and
``uuid`` plus at most one bounded dimension label, except the NIC statistics
(port and the driver's counter name).
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import ROW_CAUSES

# Rows a device worker may send (exporter.backend_api.wire): this module is a backend's.
FROM_WORKERS = True

ROWS = (
    MetricSpec(
        "accel_gaudi_memory_utilization_ratio",
        Kind.GAUGE,
        "Device memory utilization over the last second as HLML reports it, 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_gaudi_nic_port_up",
        Kind.GAUGE,
        "1 when the NIC port's link is up, 0 when down (ports the MAC info mask lists).",
        (*ID, "port"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_gaudi_nic_statistic_total",
        Kind.COUNTER,
        "A NIC port counter as the driver names it (hlml_nic_get_statistics), read on slow polls.",
        (*ID, "port", "counter"),
        otel_unit="{count}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_gaudi_replaced_rows",
        Kind.GAUGE,
        "HBM rows replaced, by cause (multiple_single_bit_ecc, double_bit_ecc).",
        (*ID, "cause"),
        otel_unit="{row}",
        values={"cause": ROW_CAUSES},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_gaudi_row_replacement_pending",
        Kind.GAUGE,
        "1 when replaced HBM rows wait for a device reset to take effect, else 0.",
        ID,
        max_series=budget.DEVICES,
    ),
)
