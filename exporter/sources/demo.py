"""``accel-exporter --demo``: simulated GPUs in place of the node's device sources.

The demo is one device source, ``demo``, driving :mod:`exporter.backends.demo` in a
worker process like any vendor's; everything after the worker (the reply checks, the
catalog, the health judge, /metrics, /v1/devices, OTLP, compat) is the daemon's own.
The vendor device sources are left out, so a GPU node run with ``--demo`` shows only
simulated GPUs, never a mix; the host, CCL and workload sources run as configured.
The demo source is polled on the ``sources.nvml`` section's schedule (interval,
slow_interval, timeout), and its ``/status`` entry says ``"simulated": true``.

Never on by default: only the ``--demo`` flag builds it (docs/demo.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from exporter.config.root import Config
from exporter.sources.base import Source
from exporter.sources.device import DeviceSource
from exporter.vendors import VENDORS

NAME = "demo"
BACKEND = "exporter.backends.demo:DemoBackend"
VENDOR = "demo"
DEVICES = 8

SourceBuilder = Callable[[Config], Sequence[Source]]


class DemoSource(DeviceSource):
    """The simulated GPUs' source: a device source whose /status says it is simulated."""

    def status(self) -> dict[str, Any]:
        """The device source's status, marked as simulated."""
        return {**super().status(), "simulated": True}


def demo_source(config: Config, devices: int = DEVICES) -> DemoSource:
    """The demo source, on the nvml section's schedule, enabled whatever that says."""
    section = dataclasses.replace(config.sources.nvml, enabled=True)
    return DemoSource(
        NAME,
        section,
        BACKEND,
        backend_config={"devices": devices},
        vendor=VENDOR,
        health=config.health,
    )


def with_demo(build: SourceBuilder, devices: int = DEVICES) -> SourceBuilder:
    """``build`` with the vendor device sources replaced by the demo source.

    The vendor sections are switched off before ``build`` runs (none of their sources
    is even constructed); the demo takes their place after ``host``, so the polling
    order, and so the exposition's order, stays that of a real node.
    """

    def build_demo(config: Config) -> list[Source]:
        off = {
            vendor.name: dataclasses.replace(getattr(config.sources, vendor.name), enabled=False)
            for vendor in VENDORS
        }
        quiet = dataclasses.replace(config, sources=dataclasses.replace(config.sources, **off))
        built = list(build(quiet))
        at = next((i + 1 for i, s in enumerate(built) if s.name == "host"), 0)
        return [*built[:at], demo_source(config, devices), *built[at:]]

    return build_demo
