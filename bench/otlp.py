"""Cost of an OTLP export and the daemon's memory while the collector is down.

Usage: ``python bench/otlp.py [--series 5000] [--passes 20] [--outage 60]`` (prints JSON).

1. Per export pass, for a synthetic store of ``--series`` device series: building
   the batch straight from the store view, encoding it to protobuf, and a
   full export to a local OTLP/HTTP and OTLP/gRPC receiver; compared with
   rendering the same store as Prometheus text (uncached), the pull path's cost.
2. The real daemon pushing over gRPC to a port nobody listens on, every 100 ms,
   for ``--outage`` seconds: RSS after a 10 s warm-up and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402

from exporter.config.otlp import resolve  # noqa: E402
from exporter.config.outputs import OtlpOutputConfig  # noqa: E402
from exporter.model import OK, Reading, Snapshot  # noqa: E402
from exporter.outputs.otlp_batch import BatchBuilder  # noqa: E402
from exporter.outputs.otlp_transport import build_exporter  # noqa: E402
from exporter.outputs.prometheus import Exposition  # noqa: E402
from exporter.outputs.text_format import negotiate  # noqa: E402
from exporter.store import Store  # noqa: E402
from tests.helpers.otlp_receiver import GrpcReceiver, HttpReceiver, free_port  # noqa: E402

PER_DEVICE = (
    "accel_power_watts",
    "accel_utilization_ratio",
    "accel_memory_used_bytes",
    "accel_memory_total_bytes",
    "accel_energy_joules_total",
)


def synthetic_store(series: int) -> Store:
    readings: list[Reading] = []
    i = 0
    while len(readings) < series:
        ident = (str(i), f"GPU-{i:08d}")
        readings.extend(Reading(metric, ident, float(i + 1)) for metric in PER_DEVICE)
        readings.extend(
            Reading("accel_clock_hertz", (*ident, clock), 1.4e9)
            for clock in ("graphics", "sm", "memory", "video")
        )
        i += 1
    store = Store()
    now = time.monotonic()
    store.put(
        Snapshot(
            "synthetic", tuple(readings[:series]), OK, time.time(), time.time(), now, 0.01, 1e9
        )
    )
    return store


def timed(fn: Callable[[], Any], passes: int) -> dict[str, float]:
    samples = []
    for _ in range(passes):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return {
        "p50_ms": round(statistics.median(samples) * 1000, 2),
        "max_ms": round(max(samples) * 1000, 2),
    }


def export_costs(series: int, passes: int) -> dict[str, Any]:
    store = synthetic_store(series)
    batches = BatchBuilder(Resource({"service.name": "bench"}), "cumulative")
    view = store.view()
    expo = Exposition(store, process_metrics=False)
    out: dict[str, Any] = {
        "series": series,
        "prometheus_render": timed(lambda: expo._encode(negotiate("")), passes),
        "otlp_collect": timed(lambda: batches.build(view), passes),
        "otlp_collect_and_encode": timed(
            lambda: encode_metrics(batches.build(view)).SerializeToString(), passes
        ),
    }
    for protocol, receiver in (("http/protobuf", HttpReceiver()), ("grpc", GrpcReceiver())):
        try:
            resolution = resolve(
                OtlpOutputConfig(enabled=True, protocol=protocol, endpoint=receiver.endpoint), {}
            )
            assert resolution.settings is not None
            exporter = build_exporter(resolution.settings)
            out[f"otlp_export_{protocol}"] = timed(
                lambda exporter=exporter: exporter.export(batches.build(view)), passes
            )
            exporter.shutdown()
            out[f"received_{protocol}"] = len(receiver.requests)
        finally:
            receiver.close()
    out["ratio_collect_encode_to_prometheus"] = round(
        out["otlp_collect_and_encode"]["p50_ms"] / out["prometheus_render"]["p50_ms"], 2
    )
    return out


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def outage_memory(seconds: float) -> dict[str, Any]:
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(
            "outputs:\n  otlp: {enabled: true, protocol: grpc, "
            f"endpoint: 'http://127.0.0.1:{port}', interval: 100ms, timeout: 500ms}}\n"
        )
        config = fh.name
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--config.file",
            config,
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.format",
            "json",
        ],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(10)
        warm = rss_bytes(proc.pid)
        time.sleep(seconds)
        end = rss_bytes(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        os.unlink(config)
    return {
        "outage_seconds": seconds,
        "attempts_per_second": 10,
        "rss_after_warmup_mb": round(warm / 1e6, 1),
        "rss_end_mb": round(end / 1e6, 1),
        "growth_mb": round((end - warm) / 1e6, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=5000)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--outage", type=float, default=60.0)
    args = parser.parse_args()
    result = {
        "export": export_costs(args.series, args.passes),
        "collector_down": outage_memory(args.outage),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
