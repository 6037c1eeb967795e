"""CPU of single NVML calls and of the nvml backend's polls, in this process; JSON out.

Run by gpu-validate's cost phase with the interpreter the project is installed in:
``python scripts/gpuvalidate/nvml_cost.py``. Standard library, pynvml and the
exporter only (it runs outside the kit's package).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def cost(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    """CPU and wall seconds per call of ``fn``, over ``repeat`` calls."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        fn()
    return {
        "cpu_seconds": (time.process_time() - cpu) / repeat,
        "wall_seconds": (time.perf_counter() - wall) / repeat,
    }


def main() -> int:
    """Measure and print."""
    import pynvml as n

    from exporter.backends.nvml import NvmlBackend

    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    calls: dict[str, Callable[[], Any]] = {
        "nvmlDeviceGetPowerUsage": lambda: n.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetUtilizationRates": lambda: n.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetMemoryInfo": lambda: n.nvmlDeviceGetMemoryInfo(h),
        "nvmlDeviceGetTemperature": lambda: n.nvmlDeviceGetTemperature(h, 0),
        "nvmlDeviceGetClockInfo": lambda: n.nvmlDeviceGetClockInfo(h, 1),
        "nvmlDeviceGetTotalEnergyConsumption": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
        "nvmlDeviceGetPerformanceState": lambda: n.nvmlDeviceGetPerformanceState(h),
    }
    per_call: dict[str, Any] = {}
    for name, fn in calls.items():
        try:
            per_call[name] = cost(fn, 200)
        except n.NVMLError as exc:
            per_call[name] = {"error": str(exc)}
    cpus = [c["cpu_seconds"] for c in per_call.values() if "cpu_seconds" in c]
    n.nvmlShutdown()
    backend = NvmlBackend({"events": False})
    inventory = backend.bootstrap()
    backend.poll(slow=True, processes=True, events=False)  # learn the layout once
    fast = cost(lambda: backend.poll(slow=False, processes=True, events=False), 20)
    slow = cost(lambda: backend.poll(slow=True, processes=True, events=False), 5)
    backend.close()
    print(
        json.dumps(
            {
                "devices": len(inventory.get("devices", [])),
                "per_call": per_call,
                "cpu_seconds_per_call_median": statistics.median(cpus) if cpus else None,
                "backend_fast_poll": fast,
                "backend_slow_poll": slow,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
