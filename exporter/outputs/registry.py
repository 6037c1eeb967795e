"""Push output factories by config name (Prometheus pull is always on)."""

from __future__ import annotations

from collections.abc import Callable

from exporter.config.schema import Config
from exporter.outputs.base import Output
from exporter.store import Store

Factory = Callable[[Config, Store], Output]

# name -> (is it enabled in this config?, factory)
FACTORIES: dict[str, tuple[Callable[[Config], bool], Factory]] = {}


def build_outputs(config: Config, store: Store) -> list[Output]:
    """Every push output the config enables."""
    return [factory(config, store) for enabled, factory in FACTORIES.values() if enabled(config)]
