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

from typing import TYPE_CHECKING

from exporter import log
from exporter.config.root import Config
from exporter.family_names import ACCEL_COMPAT_FIELD_UNSERVED_INFO, ACCEL_COMPAT_INFO
from exporter.model import Reading
from exporter.outputs import stamp
from exporter.outputs.compat import Compat, from_config
from exporter.outputs.profile import Profile
from exporter.outputs.prometheus import Exposition
from exporter.store import Store

if TYPE_CHECKING:
    from exporter.outputs.compat import dcgm_csv

# The store part the compat info families are published under (a source of
# accel_exporter_series of its own).
COMPAT_PART = "compat"
UNSERVED = ACCEL_COMPAT_FIELD_UNSERVED_INFO
SERVED = ACCEL_COMPAT_INFO
# (peer, field, reason) already logged: a reload with the same file says nothing again.
_REPORTED: set[tuple[str, str, str]] = set()


def compat_for(config: Config, previous: Compat | None = None) -> Compat | None:
    """The compat series ``config`` asks for, its field files read (None: compat off)."""
    prometheus = config.outputs.prometheus
    dcgm_fields = _dcgm_fields(config, previous)
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
    return from_config(prometheus.compat, prometheus.cluster_name, selection, dcgm_fields)


def _dcgm_fields(config: Config, previous: Compat | None) -> dcgm_csv.Selection | None:
    """The users' dcgm-exporter collectors CSV (``compat_fields.dcgm``), read as it is."""
    prometheus = config.outputs.prometheus
    path = prometheus.compat_fields.get("dcgm", "")
    if not path or not any(n.startswith("dcgm") for n in prometheus.compat):
        return None
    from exporter.outputs.compat import dcgm_csv

    logger = log.get(output="prometheus", peer="dcgm", file=path)
    try:
        selection = dcgm_csv.load(path)
    except (OSError, dcgm_csv.CsvError) as exc:
        logger.error("compat field file unusable, previous selection kept", problem=str(exc))
        return previous.dcgm_fields if previous is not None else None
    for field, note in selection.notes:
        if ("dcgm", field, note) not in _REPORTED:
            _REPORTED.add(("dcgm", field, note))
            logger.warning("compat field file: type used as written", field=field, note=note)
    logger.info(
        "compat field list loaded",
        served=[f for f, _, _ in selection.fields],
        labels=list(selection.labels),
    )
    return selection


def compat_readings(compat: Compat | None) -> list[Reading]:
    """What compat serves and what it does not, as readings of our own families.

    ``accel_compat_info{peer,version}`` per vocabulary served, and one
    ``accel_compat_field_unserved_info`` per listed field compat does not serve (each
    logged once, by name, with its reason).
    """
    if compat is None:
        return []
    out = [Reading(SERVED, pair, 1.0) for pair in compat.served()]
    missing: list[tuple[str, str, str]] = []
    if compat.amd_selection is not None:
        from exporter.outputs.compat import amd_fields

        missing += [("amd", f, why) for f, why in amd_fields.unserved(compat.amd_selection)]
    if compat.dcgm_fields is not None:
        missing += [("dcgm", f, why) for f, why in compat.dcgm_fields.unserved]
    for key in dict.fromkeys(missing):
        peer, field, reason = key
        if key not in _REPORTED:
            _REPORTED.add(key)
            log.get(output="prometheus").warning(
                "compat field not served", peer=peer, field=field, reason=reason
            )
        out.append(Reading(UNSERVED, key, 1.0))
    return out


def exposition_for(store: Store, config: Config, *, process_metrics: bool = True) -> Exposition:
    """The exposition of ``outputs.prometheus`` over ``store`` (its compat info published)."""
    compat = compat_for(config)
    store.publish(COMPAT_PART, compat_readings(compat))
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
    exposition.store.publish(COMPAT_PART, compat_readings(compat))
    exposition.set_stamp(
        stamp.from_config(config),
        compat=compat,
        profile=Profile.from_config(config.outputs.prometheus, exposition.store.catalog),
    )
