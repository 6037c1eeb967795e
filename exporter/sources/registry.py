"""Source factories by config section name: adding a source = one entry here.

Each factory builds a source from the whole config (it reads its own section,
and may read others, e.g. enrichers). The order here is the polling order, and
so the order of the phase offsets.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.config.schema import Config, SourceConfig
from exporter.sources.base import Source
from exporter.sources.device import DeviceSource
from exporter.sources.host import HostSource

Factory = Callable[[Config], Source]


def _host(config: Config) -> Source:
    return HostSource("host", config.sources.host)


def _amdsmi(config: Config) -> Source:
    cfg = config.sources.amdsmi
    return DeviceSource(
        "amdsmi",
        cfg,
        "exporter.backends.amdsmi:AmdSmiBackend",
        backend_config={"events": cfg.events, "event_types": list(cfg.event_types)},
    )


FACTORIES: dict[str, Factory] = {
    "host": _host,
    "amdsmi": _amdsmi,
}


def section(config: Config, name: str) -> SourceConfig:
    """The config section of a source."""
    value = getattr(config.sources, name)
    assert isinstance(value, SourceConfig)
    return value


def build_sources(config: Config) -> list[Source]:
    """Every source whose section does not say ``enabled: false``."""
    return [
        factory(config)
        for name, factory in FACTORIES.items()
        if section(config, name).enabled is not False
    ]
