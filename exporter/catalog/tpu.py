"""Google TPU families that no other vendor has (the shared ones are in ``device.py``).

The libtpu runtime metric service exists only while a workload holds the
chips, so whether it answers is itself a series, per configured address.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.spec import Kind, MetricSpec

# Upper bounds (seconds) the service's own buckets are folded into: DCN and host
# transfers and collectives span microseconds to seconds.
LATENCY_BUCKETS = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

ROWS = (
    MetricSpec(
        "accel_tpu_runtime_attached",
        Kind.GAUGE,
        "1 while a TPU workload serves libtpu runtime metrics at this address, 0 when none"
        " does (idle chips) or it fails.",
        ("address",),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_tpu_transfer_latency_seconds",
        Kind.HISTOGRAM,
        "Latency distribution libtpu keeps for a multislice workload (DCN, host<->device"
        " transfers, collectives), cumulative since the workload started; kind names it,"
        " buffer_size is libtpu's size class. Only where the service offers it.",
        ("address", "kind", "buffer_size"),
        unit="seconds",
        buckets=LATENCY_BUCKETS,
        max_series=budget.SMALL,
    ),
)
