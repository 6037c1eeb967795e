"""Push output factories by config name (Prometheus pull is always on)."""

from __future__ import annotations

from collections.abc import Callable

from exporter.config.root import Config
from exporter.outputs.base import Output
from exporter.store import Store

# (config, store) -> the output (built, not started: a reload compares fingerprints).
Factory = Callable[[Config, Store], Output]


def _otlp(config: Config, store: Store) -> Output:
    # Imported here: the OpenTelemetry SDK is an optional extra, needed only when enabled.
    from exporter.outputs import stamp
    from exporter.outputs.otlp import OtlpOutput
    from exporter.outputs.prometheus_setup import compat_for

    # The compat series and the workload labels of outputs.prometheus are pushed too,
    # as /metrics serves them.
    return OtlpOutput.from_config(
        config.outputs.otlp, store, compat_for(config), stamp.from_config(config)
    )


def _kubernetes(config: Config, store: Store) -> Output:
    from exporter.outputs.kube_health import KubeHealthWriter

    # It resolves devices from this node's ResourceSlices itself: whether or not a
    # source lists them (DRA attribution), a failed DRA GPU gets its rule.
    return KubeHealthWriter(config.outputs.kubernetes, store, kube=config.kubernetes)


def _nvsentinel(config: Config, store: Store) -> Output:
    # Imported here: grpc and protobuf are loaded only when the output is enabled.
    from exporter.outputs.nvsentinel import build

    return build(config.outputs.nvsentinel, store, config.kubernetes.node_name)


# name -> (is it enabled in this config?, factory)
FACTORIES: dict[str, tuple[Callable[[Config], bool], Factory]] = {
    "otlp": (lambda config: config.outputs.otlp.enabled, _otlp),
    "kubernetes": (lambda config: config.outputs.kubernetes.enabled, _kubernetes),
    "nvsentinel": (lambda config: config.outputs.nvsentinel.enabled, _nvsentinel),
}


def build_outputs(config: Config, store: Store) -> list[Output]:
    """Every push output the config enables, built and not started."""
    return [factory(config, store) for enabled, factory in FACTORIES.values() if enabled(config)]
