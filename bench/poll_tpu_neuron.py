"""CPU per poll of the tpu and neuron sources: 8 TPU chips and 16 Neuron devices (fakes).

Run by hand: ``.venv/bin/python bench/poll_tpu_neuron.py [--polls 700]``; prints JSON.

tpu: the worker's poll (:class:`exporter.backends.tpu.TpuBackend`, the real gRPC
client) against the fake metric service (tpu-info's proto, its own process, so
its CPU is not counted) serving 8 v5e chips and two latency distributions; the
reply encoded as the worker does; the daemon's check of it (TpuSource). "bare" is
the same gRPC calls with nothing parsed: the floor any client pays.

neuron: the daemon's side for a trn1.32xlarge-like report (16 devices, 32
NeuronCores, 16 runtimes): parsing and accumulating one line, and building one
poll's readings. "bare" is ``json.loads`` of the same line.

CPU is ``time.process_time`` of this process, the minimum of interleaved rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _common import cpu_min  # noqa: E402

from exporter.backend_api.tpu import DISTRIBUTIONS  # noqa: E402
from exporter.backends.tpu import METRICS, TpuBackend  # noqa: E402
from exporter.config.devices import NeuronSourceConfig, TpuSourceConfig  # noqa: E402
from exporter.sources.device import parse_inventory  # noqa: E402
from exporter.sources.neuron import NeuronSource  # noqa: E402
from exporter.sources.tpu import TpuSource  # noqa: E402
from exporter.workers.child import reply_frame  # noqa: E402
from exporter.workers.protocol import decode  # noqa: E402
from tests.fakes.neuron import control as neuron  # noqa: E402
from tests.fakes.neuron.neuron_monitor import report  # noqa: E402
from tests.fakes.tpu import control as tpu  # noqa: E402

TPU_CHIPS = 8
NEURON_DEVICES = 16


def bench_tpu(work: Path, polls: int) -> dict[str, Any]:
    host = tpu.make_host(work / "tpu-host", TPU_CHIPS)
    names = list(DISTRIBUTIONS)[:2]
    dist = {"buffer_size": "8MiB", "exponential": [20, 2.0, 1.0], "counts": [1] * 22, "mean": 9.0}
    service = tpu.FakeService(
        work / "svc",
        {"devices": tpu.devices(TPU_CHIPS), "distributions": {n: [dist] for n in names}},
    ).start()
    try:
        config = TpuSourceConfig(addresses=[service.address], host_root=str(host)).resolved()
        backend = TpuBackend(
            {"addresses": [service.address], "host_root": str(host), "call_timeout": 2.0}
        )
        inventory = backend.bootstrap()
        source = TpuSource("tpu", config)
        source._vendor, source._devices = parse_inventory(inventory)
        call, pb = backend._calls[service.address], backend._pb

        def through() -> Any:
            return backend.handle("poll", {})

        def bare() -> None:
            futures = [call.future(pb.MetricRequest(metric_name=n), timeout=2.0) for n in METRICS]
            for f in futures:
                with contextlib.suppress(Exception):  # NOT_FOUND: distributions not served
                    f.result()

        def cycle() -> Any:
            frame = reply_frame({"type": "result", "id": 1, "result": through()})
            return source._check_reply(decode(frame[4:])["result"], False)

        readings = cycle()
        through_cpu, bare_cpu, cycle_cpu = cpu_min([through, bare, cycle], polls)
        backend.close()
    finally:
        service.stop()
    return {
        "chips": TPU_CHIPS,
        "rpcs_per_poll": len(METRICS),
        "worker_cpu_seconds_per_poll": through_cpu,
        "bare_grpc_cpu_seconds_per_poll": bare_cpu,
        "worker_ratio_to_bare": through_cpu / bare_cpu,
        "cycle_cpu_seconds_per_poll": cycle_cpu,
        "readings_per_poll": len(readings),
    }


def bench_neuron(work: Path, polls: int) -> dict[str, Any]:
    host = neuron.make_host(work / "neuron-host", NEURON_DEVICES)
    runtimes = []
    for r in range(NEURON_DEVICES):
        cores = (2 * r, 2 * r + 1)
        runtimes.append(
            {
                "tag": f"worker-{r}",
                "pid": 1000 + r,
                "util": {str(c): 37.5 for c in cores},
                "memory": {
                    str(c): {
                        "constants": 1,
                        "model_code": 2,
                        "model_shared_scratchpad": 3,
                        "runtime_memory": 4,
                        "tensors": 5,
                    }
                    for c in cores
                },
                "host": 1 << 30,
                "device": 8 << 30,
                "vcpu": {"user": 10.0, "system": 1.0},
                "status": {"completed": 100, "timed_out": 0},
                "errors": {"generic": 0},
                "latency": {p: 0.01 for p in ("p0", "p1", "p25", "p50", "p75", "p99", "p100")},
            }
        )
    ecc = [
        {
            "neuron_device_index": i,
            "mem_ecc_corrected": 0,
            "mem_ecc_uncorrected": 0,
            "sram_ecc_corrected": 0,
            "sram_ecc_uncorrected": 0,
        }
        for i in range(NEURON_DEVICES)
    ]
    scenario = {"devices": NEURON_DEVICES, "cores_per_device": 2, "runtimes": runtimes, "ecc": ecc}
    line = (json.dumps(report(scenario, 5.0), separators=(",", ":")) + "\n").encode()
    config = NeuronSourceConfig(host_root=str(host), command=["unused"]).resolved()
    source = NeuronSource("neuron", config)
    source._rescan()
    source._program, source._running = "unused", True
    loop = asyncio.new_event_loop()
    try:
        source._on_line(line)

        def poll() -> Any:
            return loop.run_until_complete(source.poll())

        readings = poll()
        line_cpu, bare_cpu, poll_cpu = cpu_min(
            [lambda: source._on_line(line), lambda: json.loads(line), poll], polls
        )
    finally:
        loop.close()
    return {
        "devices": NEURON_DEVICES,
        "neuroncores": 2 * NEURON_DEVICES,
        "runtimes": len(runtimes),
        "line_bytes": len(line),
        "line_cpu_seconds": line_cpu,
        "bare_json_loads_cpu_seconds": bare_cpu,
        "line_ratio_to_bare": line_cpu / bare_cpu,
        "poll_cpu_seconds": poll_cpu,
        "cpu_seconds_per_period": line_cpu + poll_cpu,
        "readings_per_poll": len(readings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=700)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tpu-neuron-") as work:
        out = {
            "tpu": bench_tpu(Path(work), args.polls),
            "neuron": bench_neuron(Path(work), args.polls),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
