"""The /metrics body a config asks for, built one way for the daemon, ``once`` and OTLP.

``outputs.prometheus`` decides more than the families: ``compat`` (other exporters'
series, with ``compat_fields``' field files), ``cluster_name`` and ``workload_labels``
(label stamping). The daemon's listener, ``accel-exporter once --format prom`` and the
OTLP push read them here, so the three cannot drift apart.

A peer's field file is read when the config is loaded or reloaded. The config check
(exporter.config.outputs) already refused an unusable file, so the daemon never starts
without it; should the file change between that check and this read, the previous
selection is kept and the problem logged.
"""

from __future__ import annotations

from exporter import log
from exporter.config.root import Config
from exporter.model import Reading
from exporter.outputs import stamp
from exporter.outputs.compat import Compat, from_config
from exporter.outputs.profile import Profile
from exporter.outputs.prometheus import Exposition
from exporter.store import Store

# The store part the compat info families are published under (a source of
# accel_exporter_series of its own).
COMPAT_PART = "compat"
UNSERVED = "accel_compat_field_unserved_info"
# (peer, field, reason) already logged: a reload with the same file says nothing again.
_REPORTED: set[tuple[str, str, str]] = set()


def compat_for(config: Config, previous: Compat | None = None) -> Compat | None:
    """The compat series ``config`` asks for, its field files read (None: compat off)."""
    prometheus = config.outputs.prometheus
    selection = None
    path = prometheus.compat_fields.get("amd", "")
    if path and "amd" in prometheus.compat:
        from exporter.outputs.compat import amd_fields

        try:
            found = amd_fields.read(path)
        except amd_fields.FieldFileError as exc:
            log.get(output="prometheus").error(
                "compat field file unusable, previous selection kept", peer="amd", problem=str(exc)
            )
            selection = previous.amd_selection if previous is not None else None
        else:
            selection = found.selection()
            for note in found.notes:
                if ("amd", path, note) not in _REPORTED:
                    _REPORTED.add(("amd", path, note))
                    log.get(output="prometheus").warning(
                        "compat field file: not done as asked", peer="amd", file=path, note=note
                    )
    return from_config(prometheus.compat, prometheus.cluster_name, selection)


def unserved(compat: Compat | None) -> list[Reading]:
    """One ``accel_compat_field_unserved_info`` per listed field compat does not serve.

    Each is logged once, by name, with its reason.
    """
    if compat is None or compat.amd_selection is None:
        return []
    from exporter.outputs.compat import amd_fields

    out = []
    for field, reason in amd_fields.unserved(compat.amd_selection):
        key = ("amd", field, reason)
        if key not in _REPORTED:
            _REPORTED.add(key)
            log.get(output="prometheus").warning(
                "compat field not served", peer="amd", field=field, reason=reason
            )
        out.append(Reading(UNSERVED, key, 1.0))
    return out


def exposition_for(store: Store, config: Config, *, process_metrics: bool = True) -> Exposition:
    """The exposition of ``outputs.prometheus`` over ``store`` (its compat info published)."""
    compat = compat_for(config)
    store.publish(COMPAT_PART, unserved(compat))
    return Exposition(
        store,
        process_metrics=process_metrics,
        stamp=stamp.from_config(config),
        compat=compat,
        profile=Profile.from_config(config.outputs.prometheus, store.catalog),
    )


def reconfigure(exposition: Exposition, config: Config) -> None:
    """Apply a reloaded ``outputs.prometheus`` to ``exposition`` (the next scrape has it)."""
    compat = compat_for(config, exposition.compat)
    exposition.store.publish(COMPAT_PART, unserved(compat))
    exposition.set_stamp(
        stamp.from_config(config),
        compat=compat,
        profile=Profile.from_config(config.outputs.prometheus, exposition.store.catalog),
    )
