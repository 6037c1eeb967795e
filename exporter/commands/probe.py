"""``accel-exporter probe``: can each source run on this machine, and if not, why."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from exporter.commands.once import poll_all
from exporter.config import Config
from exporter.sources.registry import FACTORIES, section


def run(config: Config, out: TextIO = sys.stdout) -> int:
    """Print one line per source; exit 1 when a source errors, else 0.

    An ``auto`` source that is unavailable is not an error (no such device here);
    one switched on explicitly that cannot run is, as is any poll that failed.
    """
    enabled = {name: section(config, name).enabled for name in FACTORIES}
    sources = [FACTORIES[name](config) for name, on in enabled.items() if on is not False]
    results = {snap.source: snap for snap in asyncio.run(poll_all(sources))}
    width = max(len(name) for name in FACTORIES)
    status = 0
    for name, on in enabled.items():
        switch = "auto" if on == "auto" else ("on" if on else "off")
        if on is False:
            line = f"{name:<{width}}  {switch:<4}  disabled"
        else:
            snap = results[name]
            unavailable = snap.outcome.unavailable
            if unavailable and on is True:
                status = 1
            if unavailable:
                line = f"{name:<{width}}  {switch:<4}  unavailable  {snap.outcome.detail}"
            elif snap.ok:
                line = f"{name:<{width}}  {switch:<4}  ok           {len(snap.readings)} series"
            else:
                status = 1
                line = (
                    f"{name:<{width}}  {switch:<4}  error        "
                    f"{snap.outcome.reason}: {snap.outcome.detail}"
                )
        out.write(line.rstrip() + "\n")
    return status
