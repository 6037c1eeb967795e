"""Phase 4: a single-node torch.distributed NCCL job with RAS on, read by ``ccl_ras``.

Running, the job must be healthy, with its ranks and NCCL version; stopped, the
address must say ``no_job``. With NCCL's Inspector profiler plugin present, its
files are read by ``ccl_inspector`` too.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from typing import Any

from .compare import Check
from .expo import Samples, Scrape, find
from .phase_compare import free_port
from .phases import Kit, Skip, stop
from .report import Phase
from .workloads import NCCL, wait_marker

PLUGIN = "libnccl-profiler-inspector.so*"
RAS_SINCE = (2, 24)  # the first NCCL release with the RAS service


def state(samples: Samples) -> str | None:
    """The one-hot ``accel_ccl_job_state`` that is 1, None when none is."""
    hot = [labels["state"] for labels, v in find(samples, "accel_ccl_job_state") if v == 1]
    return hot[0] if len(hot) == 1 else None


def inspector_plugin(kit: Kit) -> str | None:
    """The Inspector plugin library, or None when this NCCL build has none.

    Looked for beside the NCCL torch loads (the nvidia-* wheels) and in the usual
    library folders.
    """
    code = (
        "import json, os, site\n"
        "dirs = site.getsitepackages() + [site.getusersitepackages()]\n"
        "print(json.dumps(dirs))\n"
    )
    done = subprocess.run([kit.python, "-c", code], capture_output=True, text=True, timeout=60)
    roots: list[str] = json.loads(done.stdout) if done.returncode == 0 else []
    patterns = [os.path.join(r, "nvidia", "*", "lib", PLUGIN) for r in roots]
    patterns += [
        os.path.join(d, PLUGIN) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d
    ]
    patterns += [
        f"/usr/lib/x86_64-linux-gnu/{PLUGIN}",
        f"/usr/local/lib/{PLUGIN}",
        f"/usr/local/nccl/lib/{PLUGIN}",
        f"/usr/local/cuda/lib64/{PLUGIN}",
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def run_phase(kit: Kit, phase: Phase) -> None:
    """Baseline no_job, job healthy (ranks, version, Inspector files), stopped: no_job."""
    said = kit.need_torch()
    match = re.search(r" nccl (\d+)\.(\d+)", said)
    if match is None or (int(match[1]), int(match[2])) < RAS_SINCE:
        raise Skip(f"no NCCL with RAS (2.24+) in torch: {said}")
    daemon = kit.need_daemon()
    scrape, _ = daemon.wait(lambda s: state(s.samples) is not None, timeout=10, every=0.5)
    phase.check(
        "no job before the job starts",
        state(scrape.samples) == "no_job",
        seen=state(scrape.samples),
        bound="no_job",
    )
    env = {
        "NCCL_RAS_ENABLE": "1",
        "NCCL_RAS_ADDR": f"127.0.0.1:{kit.ras_port}",
        "NCCL_DEBUG": "WARN",
    }
    plugin = inspector_plugin(kit)
    phase.figures["inspector_plugin"] = plugin
    inspector_dir = kit.work / "inspector"
    inspector_dir.mkdir(exist_ok=True)
    if plugin:
        env.update(
            {
                "NCCL_PROFILER_PLUGIN": plugin,
                "NCCL_INSPECTOR_ENABLE": "1",
                "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": "500000",
                "NCCL_INSPECTOR_DUMP_DIR": str(inspector_dir),
            }
        )
    marker = kit.work / "nccl.marker"
    init = f"tcp://127.0.0.1:{free_port()}"
    proc = kit.spawn([kit.python, "-c", NCCL, "120", str(marker), init], env=env, log="nccl.log")
    started = wait_marker(marker, proc, timeout=90)
    phase.figures["job"] = started
    scrape, healthy = daemon.wait(lambda s: state(s.samples) == "healthy", timeout=30, every=0.5)
    phase.figures.update(_job(scrape))
    phase.check(
        "job state healthy", healthy, seen=state(scrape.samples), bound="healthy within 30 s"
    )
    version = phase.figures.get("version")
    phase.check(
        "NCCL version as torch reports it",
        version == started.get("nccl"),
        seen=[version, started.get("nccl")],
        bound="equal",
    )
    phase.check(
        "ranks of the job",
        phase.figures.get("comm_ranks") == [float(started["world_size"])],
        seen=phase.figures.get("comm_ranks"),
        bound=f"one communicator of {started['world_size']}",
    )
    if plugin:
        scrape, seen = daemon.wait(
            lambda s: any(v >= 1 for _, v in find(s.samples, "accel_ccl_inspector_files")),
            timeout=20,
            every=0.5,
        )
        files = [v for _, v in find(scrape.samples, "accel_ccl_inspector_files")]
        phase.figures["inspector_files"] = files
        phase.figures["inspector_dump"] = sorted(p.name for p in inspector_dir.iterdir())
        phase.check("Inspector files read", seen, seen=files, bound=">= 1 file within 20 s")
    else:
        phase.checks.append(
            Check(
                "Inspector files read",
                "",
                "skip",
                note=f"no {PLUGIN} in this NCCL build or the library folders",
            )
        )
    stop(proc)
    scrape, gone = daemon.wait(lambda s: state(s.samples) == "no_job", timeout=20, every=0.5)
    phase.check(
        "no_job after the job stopped",
        gone,
        seen=state(scrape.samples),
        bound="within 20 s",
    )


def _job(scrape: Scrape) -> dict[str, Any]:
    s = scrape.samples
    info = find(s, "accel_ccl_job_info")
    out: dict[str, Any] = {"state": state(s)}
    if info:
        out["library"], out["version"] = info[0][0].get("library"), info[0][0].get("version")
    for name in (
        "accel_ccl_job_processes",
        "accel_ccl_job_gpus",
        "accel_ccl_job_nodes",
        "accel_ccl_communicators",
    ):
        values = [v for _, v in find(s, name)]
        out[name.removeprefix("accel_ccl_")] = values[0] if values else None
    out["comm_ranks"] = sorted(v for _, v in find(s, "accel_ccl_comm_ranks"))
    return out
