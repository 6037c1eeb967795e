"""The GPU programs the kit runs (as ``python -c``), and how to wait for them to start.

Each writes a JSON marker file once CUDA (or NCCL) is up and the work begins, so
the kit measures from the moment the GPU is busy, not from process start.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

# Source of ``nccl_version()``: torch's NCCL as "2.27.5", "none" without NCCL (old
# torch releases return NCCL's integer version code instead of a tuple).
NCCL_VERSION = """\
def nccl_version():
    import torch.distributed
    if not torch.distributed.is_nccl_available():
        return "none"
    v = torch.cuda.nccl.version()
    if isinstance(v, int) and v >= 10000:  # NCCL_VERSION_CODE from 2.9: 21905 is 2.19.5
        v = (v // 10000, v // 100 % 100, v % 100)
    elif isinstance(v, int):  # before 2.9: 2708 is 2.7.8
        v = (v // 1000, v // 100 % 10, v % 100)
    return ".".join(map(str, v))"""

# argv: mode ("load": bf16 matmuls; "hold": 1 GiB allocated, then sleep), seconds, marker.
TORCH = """\
import json, sys, time
import torch
mode, seconds, marker = sys.argv[1], float(sys.argv[2]), sys.argv[3]
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
hold = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", ""))
with open(marker, "w") as f:
    json.dump({"time": time.time(), "mode": mode, "uuid": uuid}, f)
end, n, began = time.monotonic() + seconds, 0, time.monotonic()
while time.monotonic() < end:
    if mode == "load":
        for _ in range(16):
            c = a @ b
        torch.cuda.synchronize()
        n += 16
    else:
        time.sleep(0.2)
took = time.monotonic() - began
print(json.dumps({"matmuls": n, "tflops": 2 * 8192**3 * n / took / 1e12}))
"""

# argv: seconds, marker, init address (tcp://127.0.0.1:port). One rank per GPU: NCCL
# refuses two ranks on one GPU, and the kit's machine has one.
NCCL = f"""\
import json, sys, time
import torch
import torch.distributed as dist
{NCCL_VERSION}
seconds, marker, init = float(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method=init, rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
with open(marker, "w") as f:
    json.dump({{"time": time.time(), "nccl": nccl_version(),
               "world_size": dist.get_world_size()}}, f)
end = time.monotonic() + seconds
while time.monotonic() < end:
    dist.all_reduce(x)
    torch.cuda.synchronize()
    time.sleep(0.05)
dist.destroy_process_group()
"""


def gpu_of(uuids: list[str], started: dict[str, Any]) -> str:
    """The UUID (as NVML spells it) of the GPU the workload runs on.

    torch prints it without the ``GPU-`` prefix; without it (an old torch) the
    first GPU, which is CUDA's device 0 on a machine with one GPU.
    """
    seen = str(started.get("uuid") or "")
    return next((u for u in uuids if seen and u.endswith(seen)), uuids[0])


def wait_marker(marker: Path, proc: Any, timeout: float) -> dict[str, Any]:
    """The marker's content once written.

    RuntimeError when the process ends first or ``timeout`` passes.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists():
            try:
                data: dict[str, Any] = json.loads(marker.read_text())
                return data
            except ValueError:
                pass  # being written
        if proc.poll() is not None:
            raise RuntimeError(f"the workload exited with {proc.returncode} before it started")
        time.sleep(0.1)
    raise RuntimeError(f"the workload did not start within {timeout:.0f} s")
