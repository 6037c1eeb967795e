"""Source factories by config section name: adding a source = one entry here.

Each factory builds a source from the whole config (it reads its own section,
and may read others, e.g. enrichers). The order here is the polling order, and
so the order of the phase offsets. The device vendors' factories are derived
from their entries in :data:`exporter.vendors.VENDORS` (a vendor is registered
there, not here).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from exporter.catalog import CATALOG, MetricSpec, with_rows
from exporter.catalog.workload import pod_labels_row
from exporter.config.devices import DeviceSourceConfig
from exporter.config.root import Config
from exporter.config.source import SourceConfig
from exporter.sources import cper_ledger
from exporter.sources.base import Source
from exporter.sources.ccl_inspector import CclInspectorSource
from exporter.sources.ccl_ras import CclRasSource
from exporter.sources.device import DeviceSource
from exporter.sources.host import HostSource
from exporter.vendors import VENDORS, Vendor

Factory = Callable[[Config], Source]


def _host(config: Config) -> Source:
    return HostSource("host", config.sources.host)


def _load(path: str) -> Any:
    """The class ``module:Class`` names (imported on first use: the daemon loads only its own)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _option(value: Any) -> Any:
    """A section value as the worker's JSON config takes it (a tuple as a list)."""
    return list(value) if isinstance(value, tuple | list) else value


def device_factory(vendor: Vendor) -> Factory:
    """The factory of ``vendor``'s source, from its entry in :data:`exporter.vendors.VENDORS`."""

    def build(config: Config) -> Source:
        cfg = section(config, vendor.name)
        if vendor.source:
            # The health section too: its judge keeps its memory like every device source's.
            source = _load(vendor.source)(vendor.name, cfg, health=config.health)
            assert isinstance(source, Source)
            return source
        assert isinstance(cfg, DeviceSourceConfig)
        return DeviceSource(
            vendor.name,
            cfg,
            vendor.backend,
            backend_config={key: _option(getattr(cfg, key)) for key in vendor.options},
            vendor=vendor.label,
            library=vendor.library,
            precheck=_load(vendor.precheck) if vendor.precheck else None,
            ledger=cper_ledger.store_for(getattr(cfg, vendor.ledger)) if vendor.ledger else None,
            health=config.health,
        )

    return build


def _ccl_ras(config: Config) -> Source:
    return CclRasSource("ccl_ras", config.sources.ccl_ras)


def _ccl_inspector(config: Config) -> Source:
    return CclInspectorSource("ccl_inspector", config.sources.ccl_inspector)


def _fabric(config: Config) -> Source:
    from exporter.sources.fabric import FabricSource

    section = config.sources.fabric
    # Its own state directory, else the health memory's (where a deployment keeps state).
    return FabricSource("fabric", section, section.state_dir or config.health.state_dir)


def _cuda_checkpoint(config: Config) -> Source:
    from exporter.sources.checkpoint import CheckpointSource

    return CheckpointSource("cuda_checkpoint", config.sources.cuda_checkpoint)


def _diag(config: Config) -> Source:
    from exporter.sources.diag import DiagSource

    # Its runs count as long as an XID does: the health window.
    return DiagSource("diag", config.sources.diag, window=config.health.event_window)


def _workload(config: Config) -> Source:
    from exporter.sources.workload import WorkloadSource

    return WorkloadSource("workload", config.workload, config.kubernetes)


FACTORIES: dict[str, Factory] = {
    "host": _host,
    **{vendor.name: device_factory(vendor) for vendor in VENDORS},
    "ccl_ras": _ccl_ras,
    "ccl_inspector": _ccl_inspector,
    "fabric": _fabric,
    # Enrichers come last: they read what the sources above reported.
    "cuda_checkpoint": _cuda_checkpoint,
    # Matches result files to the devices the device sources listed.
    "diag": _diag,
    "workload": _workload,
}

# Sources whose section is not sources.<name>.
SECTIONS: dict[str, Callable[[Config], SourceConfig]] = {
    "workload": lambda config: config.workload,
}


def section(config: Config, name: str) -> SourceConfig:
    """The config section of a source."""
    value = SECTIONS[name](config) if name in SECTIONS else getattr(config.sources, name)
    assert isinstance(value, SourceConfig)
    return value


def build_sources(config: Config) -> list[Source]:
    """Every source whose section does not say ``enabled: false``."""
    return [
        factory(config)
        for name, factory in FACTORIES.items()
        if section(config, name).enabled is not False
    ]


def catalog_for(config: Config) -> Mapping[str, MetricSpec]:
    """The catalog as ``config``'s sources export it: rows with configured labels.

    The store validates readings against it and the outputs render by it, so the
    label set of such a row is fixed for the life of a store (a daemon run).
    """
    pod_labels = config.workload.k8s.pod_labels
    if config.workload.enabled is False or not pod_labels.enabled:
        return CATALOG
    return with_rows([pod_labels_row(pod_labels.keys)])
