"""What the TPU worker's reply carries besides device rows: the latency distributions.

The worker (:mod:`exporter.backends.tpu`) asks libtpu for these metrics and sends each as a
histogram, by kind; the daemon (:mod:`exporter.sources.tpu`) checks a reply against the same
names and bounds before it believes it.
"""

from __future__ import annotations

# Latency distributions of multislice workloads, in microseconds, by kind (the
# histogram's kind label); a single-slice workload answers NOT_FOUND.
DISTRIBUTIONS = {
    f"megascale.{kind}.microsecond.cumulative.distribution": kind.removesuffix("_latencies")
    for kind in (
        "dcn_transfer_latencies",
        "dcn_inbound_transfer_latencies",
        "host_to_device_transfer_latencies",
        "device_to_host_transfer_latencies",
        "collective_end_to_end_latencies",
        "mxla_compute_latencies",
        "grpc_tcp_min_rtt",
    )
}
# Bounds on what one distribution may carry: points (label sets) and a label's length.
MAX_POINTS = 64
MAX_LABEL = 64
