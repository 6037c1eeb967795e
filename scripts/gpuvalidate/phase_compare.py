"""Phase 2: the daemon against nvidia-smi, family by family, on every GPU.

The daemon runs with every NVIDIA-side source on; each family nvidia-smi also
gives is compared in three scrape / query / scrape rounds.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from .compare import FIELDS, choose, combine, compare_round
from .expo import Daemon, Scrape, find, one
from .phases import Kit
from .report import Phase
from .smi import SmiError

ROUNDS = 3
INTERVAL = 1.0  # the nvml source's interval in the kit's daemon
SLOW_INTERVAL = 2.0


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def daemon_config(kit: Kit, ras_port: int) -> dict[str, Any]:
    """The daemon's configuration for every phase.

    nvml fast (1 s, slow fields every 2 s) with processes and events; ccl_ras on the
    port the kit's NCCL job will use; the Inspector folder the kit points the plugin
    at; CUDA checkpoint states.
    """
    return {
        "log": {"level": "info"},
        "sources": {
            "host": {"enabled": True, "interval": "1s"},
            "nvml": {
                "enabled": True,
                "interval": f"{INTERVAL:g}s",
                "slow_interval": f"{SLOW_INTERVAL:g}s",
                "processes": True,
                "events": True,
            },
            "amdsmi": {"enabled": False},
            "ccl_ras": {
                "enabled": True,
                "interval": "2s",
                "timeout": "1500ms",
                "addresses": [f"127.0.0.1:{ras_port}"],
            },
            "ccl_inspector": {
                "enabled": True,
                "interval": "2s",
                "dir": str(kit.work / "inspector"),
            },
            "cuda_checkpoint": {"enabled": "auto", "interval": "2s"},
        },
        "workload": {"enabled": False},
    }


def start_daemon(kit: Kit, config: dict[str, Any], name: str) -> Daemon:
    """Write ``config`` (JSON is YAML) and start a daemon with it."""
    path = kit.work / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=2))
    daemon = Daemon(kit.python, path, kit.work / f"{name}.log", env=kit.env)
    return daemon.start()


def complete(uuids: list[str]) -> Any:
    """A readiness test: every GPU up, with its fast and its slow fields."""

    def ready(scrape: Scrape) -> bool:
        s = scrape.samples
        return all(
            one(s, "accel_device_up", uuid=u) == 1
            and one(s, "accel_power_watts", uuid=u) is not None
            and find(s, "accel_clock_max_hertz", uuid=u)
            for u in uuids
        )

    return ready


def run_phase(kit: Kit, phase: Phase) -> None:
    """Start the daemon, wait for complete metrics, compare three rounds."""
    offered: set[str] | None
    try:
        offered = kit.smi.offered()
    except SmiError as exc:
        offered = None
        phase.figures["help_query_gpu"] = f"unreadable ({exc}); querying the newest names"
    names = choose(FIELDS, offered)
    query, refused = kit.smi.usable(["uuid", *sorted({n for n in names.values() if n})])
    if "uuid" not in query:
        raise RuntimeError(f"nvidia-smi does not answer a query of uuid: {refused.get('uuid')}")
    if refused:
        phase.figures["nvidia_smi_refused"] = refused
        names = {key: (n if n in query else None) for key, n in names.items()}
    phase.figures["gpus"] = kit.gpus()
    kit.ras_port = free_port()
    kit.daemon = start_daemon(kit, daemon_config(kit, kit.ras_port), "daemon")
    kit.children.append(("kit", kit.daemon.proc))  # type: ignore[arg-type]
    _, ready = kit.daemon.wait(complete(kit.uuids), timeout=60)
    phase.figures["daemon_ready_seconds"] = round(time.monotonic() - kit.daemon.started_at, 3)
    if not ready:
        raise RuntimeError("the daemon did not export every GPU's fast and slow fields in 60 s")
    rounds = []
    for _ in range(ROUNDS):
        before = kit.daemon.scrape()
        result = kit.smi.query(query)
        # The next poll after the query: then the two scrapes bracket nvidia-smi's moment.
        time.sleep(INTERVAL * 1.5)
        after = kit.daemon.scrape()
        rounds.append(compare_round(FIELDS, names, result.rows, before.samples, after.samples))
        phase.figures.setdefault("nvidia_smi_query_seconds", []).append(round(result.seconds, 3))
    phase.checks.extend(combine(rounds, FIELDS))
    phase.figures["fields_compared"] = sorted({c.name for c in phase.checks if c.verdict != "skip"})
