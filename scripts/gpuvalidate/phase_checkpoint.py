"""Phase 5: the ``cuda_checkpoint`` source sees a live torch process as ``running``."""

from __future__ import annotations

from .expo import Scrape, find
from .phases import Kit
from .report import Phase
from .workloads import TORCH, wait_marker


def run_phase(kit: Kit, phase: Phase) -> None:
    """Start a torch process holding GPU memory; wait for its checkpoint state."""
    kit.need_torch()
    daemon = kit.need_daemon()
    marker = kit.work / "hold.marker"
    proc = kit.spawn([kit.python, "-c", TORCH, "hold", "60", str(marker)], log="hold.log")
    wait_marker(marker, proc, timeout=90)
    pid = str(proc.pid)

    def states(scrape: Scrape) -> dict[str, float]:
        return {
            labels["state"]: value
            for labels, value in find(scrape.samples, "accel_process_checkpoint_state", pid=pid)
        }

    scrape, seen = daemon.wait(lambda s: states(s).get("running") == 1, timeout=30, every=0.5)
    phase.figures["pid"] = proc.pid
    phase.figures["states"] = states(scrape)
    errors = find(scrape.samples, "accel_process_checkpoint_query_errors_total")
    phase.figures["query_errors"] = {labels.get("reason", ""): v for labels, v in errors}
    unavailable = find(
        scrape.samples, "accel_exporter_source_unavailable_info", source="cuda_checkpoint"
    )
    if unavailable:
        phase.figures["source_unavailable"] = unavailable[0][0].get("reason")
    phase.check(
        "checkpoint state of the torch process is running",
        seen,
        seen=phase.figures["states"],
        bound="state=running is 1 within 30 s",
    )
