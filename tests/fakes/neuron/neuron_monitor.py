"""A fake neuron-monitor: prints the documented report schema, one JSON document per line.

Usage as neuron-monitor: ``neuron_monitor.py SCENARIO -c CONFIG`` (the daemon
appends ``-c <its config file>``; its period is honoured). SCENARIO is a JSON
file read again before every report, so a test changes behaviour mid-run:

``{"devices": N, "cores_per_device": C, "memory_size": B, "device_type": str,
   "runtimes": [{"tag", "pid", "util": {nc: %}, "memory": {nc: {category: B}},
                 "host": B, "device": B, "vcpu": {"user": %, "system": %},
                 "status": {name: n}, "errors": {name: n}, "latency": {p: s} | null}],
   "ecc": [{"neuron_device_index": i, "mem_ecc_corrected": n, ...}],
   "limit": total reports over all lives (then silent, alive),
   "exit_after": reports per life, then exit with "exit_code",
   "stall": true (alive, silent), "garbage": true (a non-JSON line instead),
   "pad": bytes of padding added to each line, "hw_error": str,
   "ignore_term": true (SIGTERM ignored, read when a life starts)}``

Every report printed is appended to ``<SCENARIO>.ledger`` (one line each), so a
test knows exactly how many periods' deltas the daemon was given; every life appends
its pid to ``<SCENARIO>.pids``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def _period(argv: list[str]) -> float:
    if "-c" in argv:
        config = json.loads(Path(argv[argv.index("-c") + 1]).read_text())
        return float(str(config.get("period", "5s")).rstrip("s"))
    return 5.0


def report(s: dict[str, Any], period: float) -> dict[str, Any]:
    runtimes = []
    for r in s.get("runtimes", []):
        cores = {
            str(nc): {"neuroncore_utilization": u, "flops": 1e12}
            for nc, u in r.get("util", {}).items()
        }
        runtimes.append(
            {
                "pid": r.get("pid", 4242),
                "address": "",
                "neuron_runtime_tag": r.get("tag", ""),
                "error": r.get("runtime_error", ""),
                "report": {
                    "neuroncore_counters": {
                        "period": period,
                        "error": "",
                        "neuroncores_in_use": cores,
                    },
                    "memory_used": {
                        "period": period,
                        "error": "",
                        "neuron_runtime_used_bytes": {
                            "host": r.get("host", 0),
                            "neuron_device": r.get("device", 0),
                            "usage_breakdown": {
                                "host": {
                                    "application_memory": 1,
                                    "constants": 0,
                                    "dma_buffers": 0,
                                    "tensors": 0,
                                },
                                "neuroncore_memory_usage": r.get("memory", {}),
                            },
                        },
                        "loaded_models": [],
                    },
                    "neuron_runtime_vcpu_usage": {
                        "period": period,
                        "error": "",
                        "vcpu_usage": r.get("vcpu", {"user": 0.0, "system": 0.0}),
                    },
                    "execution_stats": {
                        "period": period,
                        "error": "",
                        "error_summary": r.get("errors", {}),
                        "execution_summary": r.get("status", {}),
                        "latency_stats": {
                            "total_latency": r.get("latency"),
                            "device_latency": r.get("latency"),
                        },
                    },
                },
            }
        )
    return {
        "neuron_runtime_data": runtimes,
        "system_data": {
            "neuron_hw_counters": {
                "period": period,
                "error": "",
                "neuron_devices": s.get("ecc", []),
            },
        },
        "instance_info": {"instance_type": "trn1.32xlarge", "error": ""},
        "neuron_hardware_info": {
            "neuron_device_type": s.get("device_type", "trainium"),
            "neuroncore_version": "v2",
            "neuron_device_count": s.get("devices", 1),
            "neuroncore_per_device_count": s.get("cores_per_device", 2),
            "neuron_device_memory_size": s.get("memory_size", 34359738368),
            "logical_neuroncore_config": 1,
            "error": s.get("hw_error", ""),
        },
        "pad": "x" * int(s.get("pad", 0)),
    }


def main(argv: list[str]) -> int:
    scenario_path = Path(argv[0])
    ledger = Path(str(scenario_path) + ".ledger")
    period = _period(argv)
    printed = 0
    if json.loads(scenario_path.read_text()).get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with Path(str(scenario_path) + ".pids").open("a") as f:
        f.write(f"{os.getpid()}\n")
    print("fake neuron-monitor starting", file=sys.stderr, flush=True)
    while True:
        s = json.loads(scenario_path.read_text())
        done = len(ledger.read_text().splitlines()) if ledger.exists() else 0
        if "exit_after" in s and printed >= s["exit_after"]:
            return int(s.get("exit_code", 1))
        if not s.get("stall") and done < s.get("limit", 1 << 62):
            if s.get("garbage"):
                line = '{"neuron_runtime_data": [ garbage'
            else:
                line = json.dumps(report(s, period), separators=(",", ":"))
                with ledger.open("a") as f:
                    f.write("1\n")
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            printed += 1
        time.sleep(period)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
