"""Phase 6: ``accel-exporter record`` around a torch load, against nvidia-smi.

Its summary's peak memory and energy are compared with what nvidia-smi saw
meanwhile (energy as nvidia-smi's power samples integrated).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from .phase_load import integral
from .phases import Kit, Skip
from .report import Phase
from .smi import SmiError
from .workloads import TORCH, gpu_of

MIB = 1048576.0
SECONDS = 15.0


def _watch(kit: Kit, stop: threading.Event, into: list[tuple[float, str, float, float]]) -> None:
    """nvidia-smi every ~0.2 s: (unix time, UUID, memory.used MiB, power.draw W)."""
    while not stop.is_set():
        try:
            query = kit.smi.query(["uuid", "memory.used", "power.draw"])
        except SmiError:
            stop.wait(0.2)
            continue
        now = time.time() - (time.monotonic() - query.at)
        for row in query.rows:
            if row["memory.used"].present and row["power.draw"].present:
                into.append(
                    (now, row["uuid"].text, row["memory.used"].number(), row["power.draw"].number())
                )
        stop.wait(0.2)


def run_phase(kit: Kit, phase: Phase) -> None:
    """Record a 15 s load while watching it with nvidia-smi."""
    kit.need_torch()
    if kit.daemon is None:
        raise Skip("no daemon configuration (see the compare phase)")
    out = kit.work / "record"
    marker = kit.work / "record.marker"
    samples: list[tuple[float, str, float, float]] = []
    halt = threading.Event()
    watcher = threading.Thread(target=_watch, args=(kit, halt, samples), daemon=True)
    watcher.start()
    cmd = [
        kit.python,
        "-m",
        "exporter",
        "record",
        "--config.file",
        str(kit.daemon.config),
        "--out",
        str(out),
        "--interval",
        "500ms",
        "--",
        kit.python,
        "-c",
        TORCH,
        "load",
        str(SECONDS),
        str(marker),
    ]
    proc = kit.spawn(cmd, log="record.log")
    status = proc.wait(timeout=SECONDS + 120)
    halt.set()
    watcher.join(10)
    phase.check("record exits with the command's status", status == 0, seen=status, bound="0")
    uuid = gpu_of(kit.gpus(), json.loads(marker.read_text()))
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    device = summary.get("devices", {}).get(uuid, {})
    start, end = summary.get("start_time"), summary.get("end_time")
    inside = [
        (t, m, w)
        for t, u, m, w in samples
        if u == uuid and start is not None and end is not None and start <= t <= end
    ]
    peak_smi = max((m for _, m, _ in inside), default=None)
    energy_smi = integral([t for t, _, _ in inside], [w for _, _, w in inside]) if inside else None
    peak = device.get("peak_memory_bytes")
    energy = device.get("energy_joules")
    phase.figures.update(
        {
            "uuid": uuid,
            "wall_seconds": summary.get("wall_seconds"),
            "peak_memory_bytes": peak,
            "smi_peak_memory_bytes": None if peak_smi is None else peak_smi * MIB,
            "energy_joules": energy,
            "energy_method": device.get("energy_method"),
            "smi_energy_joules": energy_smi,
            "smi_samples": len(inside),
            "record_samples": device.get("samples"),
            "record_errors": summary.get("record_errors"),
        }
    )
    phase.check(
        "peak memory vs nvidia-smi",
        peak is not None
        and peak_smi is not None
        and abs(peak - peak_smi * MIB) <= max(0.05 * peak_smi * MIB, 512 * MIB),
        seen=[peak, None if peak_smi is None else peak_smi * MIB],
        bound="within 5% or 512 MiB (the larger)",
        uuid=uuid,
    )
    phase.check(
        "energy vs nvidia-smi power integral",
        energy is not None
        and energy_smi is not None
        and abs(energy - energy_smi) <= 0.25 * energy_smi + 50,
        seen=[energy, energy_smi],
        bound="within 25% + 50 J",
        uuid=uuid,
    )
