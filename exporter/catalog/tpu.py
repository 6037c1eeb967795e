"""Google TPU families that no other vendor has (the shared ones are in ``device.py``).

The libtpu runtime metric service exists only while a workload holds the
chips, so whether it answers is itself a series, per configured address.
"""

from __future__ import annotations

from exporter.catalog.spec import Kind, MetricSpec

ROWS = (
    MetricSpec(
        "accel_tpu_runtime_attached",
        Kind.GAUGE,
        "1 while a TPU workload serves libtpu runtime metrics at this address, 0 when none"
        " does (idle chips) or it fails.",
        ("address",),
    ),
)
