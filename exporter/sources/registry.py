"""Source factories by config section name: adding a source = one entry here.

Each factory builds a source from the whole config (it reads its own section,
and may read others, e.g. enrichers). The order here is the polling order, and
so the order of the phase offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from exporter.backends import libsearch
from exporter.catalog import CATALOG, MetricSpec, with_rows
from exporter.catalog.workload import pod_labels_row
from exporter.config.root import Config
from exporter.config.source import SourceConfig
from exporter.sources import cper_ledger
from exporter.sources.base import Source
from exporter.sources.ccl_inspector import CclInspectorSource
from exporter.sources.ccl_ras import CclRasSource
from exporter.sources.device import DeviceSource
from exporter.sources.host import HostSource

Factory = Callable[[Config], Source]


def _host(config: Config) -> Source:
    return HostSource("host", config.sources.host)


def _nvml(config: Config) -> Source:
    nvml = config.sources.nvml
    return DeviceSource(
        "nvml",
        nvml,
        "exporter.backends.nvml:NvmlBackend",
        backend_config={"events": nvml.events, "processes": nvml.processes},
        vendor="nvidia",
        health=config.health,
    )


def _amdsmi(config: Config) -> Source:
    cfg = config.sources.amdsmi
    return DeviceSource(
        "amdsmi",
        cfg,
        "exporter.backends.amdsmi:AmdSmiBackend",
        backend_config={
            "events": cfg.events,
            "event_types": list(cfg.event_types),
            "sys_path": cfg.sys_path,
            "dev_path": cfg.dev_path,
            "cper_per_poll": cfg.cper_per_poll,
        },
        vendor="amd",
        ledger=cper_ledger.store_for(cfg.state_dir),
        health=config.health,
    )


def _levelzero(config: Config) -> Source:
    cfg = config.sources.levelzero
    return DeviceSource(
        "levelzero",
        cfg,
        "exporter.backends.levelzero:LevelZeroBackend",
        backend_config={"library_path": cfg.library_path},
        vendor="intel",
        library=libsearch.LEVELZERO,
        health=config.health,
    )


def _hlml(config: Config) -> Source:
    cfg = config.sources.hlml
    return DeviceSource(
        "hlml",
        cfg,
        "exporter.backends.hlml:HlmlBackend",
        backend_config={"library_path": cfg.library_path, "nic_statistics": cfg.nic_statistics},
        vendor="intel_gaudi",
        library=libsearch.HLML,
        health=config.health,
    )


def _tpu(config: Config) -> Source:
    from exporter.sources.tpu import TpuSource

    return TpuSource("tpu", config.sources.tpu)


def _neuron(config: Config) -> Source:
    from exporter.sources.neuron import NeuronSource

    return NeuronSource("neuron", config.sources.neuron)


def _ccl_ras(config: Config) -> Source:
    return CclRasSource("ccl_ras", config.sources.ccl_ras)


def _ccl_inspector(config: Config) -> Source:
    return CclInspectorSource("ccl_inspector", config.sources.ccl_inspector)


def _cuda_checkpoint(config: Config) -> Source:
    from exporter.sources.checkpoint import CheckpointSource

    return CheckpointSource("cuda_checkpoint", config.sources.cuda_checkpoint)


def _workload(config: Config) -> Source:
    from exporter.sources.workload import WorkloadSource

    return WorkloadSource("workload", config.workload)


FACTORIES: dict[str, Factory] = {
    "host": _host,
    "nvml": _nvml,
    "amdsmi": _amdsmi,
    "levelzero": _levelzero,
    "hlml": _hlml,
    "tpu": _tpu,
    "neuron": _neuron,
    "ccl_ras": _ccl_ras,
    "ccl_inspector": _ccl_inspector,
    # Enrichers come last: they read what the sources above reported.
    "cuda_checkpoint": _cuda_checkpoint,
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
