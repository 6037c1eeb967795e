"""Push output factories by config name (Prometheus pull is always on)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from exporter.config.root import Config
from exporter.outputs.base import Output
from exporter.store import Store

# (config, store, the sources the runtime polls) -> the output.
Factory = Callable[[Config, Store, Sequence[Any]], Output]


def _otlp(config: Config, store: Store, sources: Sequence[Any]) -> Output:
    # Imported here: the OpenTelemetry SDK is an optional extra, needed only when enabled.
    from exporter.outputs.otlp import OtlpOutput

    return OtlpOutput.from_config(config.outputs.otlp, store)


def dra_resolver(sources: Sequence[Any]) -> Callable[[str], Any] | None:
    """The first source's ``dra_lookup(uuid)`` (uuid -> its DRA device), if one has it.

    The source that lists this node's ResourceSlices offers it; without one, the
    Kubernetes writer writes the Node condition only and lists failed devices as
    unresolved in /status.
    """
    for source in sources:
        lookup = getattr(source, "dra_lookup", None)
        if callable(lookup):
            return lookup  # type: ignore[no-any-return]
    return None


def _kubernetes(config: Config, store: Store, sources: Sequence[Any]) -> Output:
    from exporter.outputs.kube_health import KubeHealthWriter

    return KubeHealthWriter(
        config.outputs.kubernetes,
        store,
        kube=config.kubernetes,
        resolver=dra_resolver(sources),
    )


# name -> (is it enabled in this config?, factory)
FACTORIES: dict[str, tuple[Callable[[Config], bool], Factory]] = {
    "otlp": (lambda config: config.outputs.otlp.enabled, _otlp),
    "kubernetes": (lambda config: config.outputs.kubernetes.enabled, _kubernetes),
}


def build_outputs(config: Config, store: Store, sources: Sequence[Any] = ()) -> list[Output]:
    """Every push output the config enables; some read what the ``sources`` offer."""
    return [
        factory(config, store, sources)
        for enabled, factory in FACTORIES.values()
        if enabled(config)
    ]
