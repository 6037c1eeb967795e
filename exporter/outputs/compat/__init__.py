"""Other exporters' series, built at render time from the same store view as ours.

``outputs.prometheus.compat`` names the exporters to imitate (``dcgm``:
NVIDIA's dcgm-exporter 4.8 names, ``dcgm@4.8``/``dcgm@4.9``/``dcgm@4.10`` a pinned
release, ``amd``: AMD's device-metrics-exporter 1.5); their
series are appended to the exposition, so dashboards, alerts and autoscalers
written for them work unchanged. Nothing is read twice and nothing is cached
here: the exposition caches the whole body per view, as for our own series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter import log
from exporter.outputs.compat.family import Family, encode
from exporter.outputs.compat.view import node_name
from exporter.store import View

if TYPE_CHECKING:
    from exporter.outputs.compat.dcgm_csv import Selection

__all__ = ["CHOICES", "Compat", "Family", "encode", "from_config"]

CHOICES = ("dcgm", "dcgm@4.8", "dcgm@4.9", "dcgm@4.10", "amd")
# The (peer, version) accel_compat_info says each entry serves.
PEER_VERSION = {
    "dcgm": ("dcgm", "4.8"),
    "dcgm@4.8": ("dcgm", "4.8"),
    "dcgm@4.9": ("dcgm", "4.9"),
    "dcgm@4.10": ("dcgm", "4.10"),
    "amd": ("amd", "1.5"),
}
INFO = "accel_compat_info"


@dataclass(frozen=True)
class Compat:
    """Which exporters to imitate, and the node-wide label values they carry."""

    names: tuple[str, ...]
    hostname: str
    cluster_name: str = ""
    # The users' dcgm-exporter collectors CSV (compat_fields.dcgm), None: the defaults.
    dcgm_fields: Selection | None = None

    def families(self, view: View, wanted: Sequence[str] | None = None) -> list[Family]:
        """The families of every configured exporter (``wanted`` names only, when given).

        A builder that fails is logged and skipped: the scrape still gets our own series.
        """
        # Their tables are imported by a daemon that serves them only (0.35 MiB of
        # every other daemon's idle memory, bench/idle.py).
        from exporter.outputs.compat import amd, dcgm

        def dcgm_of(version: str) -> Callable[[], list[Family]]:
            chosen = self.dcgm_fields
            if chosen is None:
                return lambda: dcgm.build(view, self.hostname, version)
            from exporter.outputs.compat import dcgm_custom

            return lambda: dcgm_custom.build(view, self.hostname, version, chosen)

        builders: dict[str, Callable[[], list[Family]]] = {
            "amd": lambda: amd.build(view, self.hostname, self.cluster_name),
        }
        builders.update({e: dcgm_of(PEER_VERSION[e][1]) for e in CHOICES if e != "amd"})
        out: list[Family] = [_info(self.names)] if wanted is None or INFO in wanted else []
        if self.dcgm_fields is not None and self.dcgm_fields.unserved:
            from exporter.outputs.compat import dcgm_custom

            if wanted is None or dcgm_custom.UNSERVED in wanted:
                out.append(dcgm_custom.unserved("dcgm", self.dcgm_fields))
        served: set[str] = set()
        # With two dcgm versions the newest is built first: a name both serve (same
        # unit, checked at config load) is written once, with the newer labels.
        for name in sorted(self.names, key=_newest_first):
            try:
                found = [f for f in builders[name]() if f.name not in served]
                served.update(f.name for f in found)
            except Exception as exc:
                log.get(output="prometheus").error(
                    "compat render failed", compat=name, error=repr(exc)
                )
                continue
            out += found if wanted is None else [f for f in found if f.name in wanted]
        return out


def _newest_first(entry: str) -> tuple[int, ...]:
    peer, version = PEER_VERSION[entry]
    return (0 if peer == "dcgm" else 1, *(-int(p) for p in version.split(".")))


def _info(names: Sequence[str]) -> Family:
    """accel_compat_info{peer,version} = 1 for each (peer, version) served."""
    family = Family(INFO, "gauge", "The other exporters' vocabularies served (peer, version).")
    for peer, version in dict.fromkeys(PEER_VERSION[n] for n in names):
        family.add([("peer", peer), ("version", version)], 1.0)
    return family


def from_config(
    names: Sequence[str], cluster_name: str, field_lists: Mapping[str, str] | None = None
) -> Compat | None:
    """The compat exposition the config asks for, or None (the default: nothing added).

    ``dcgm`` and ``dcgm@4.8`` are one vocabulary: asked for both, it is served once.
    ``field_lists`` is ``compat_fields`` (peer -> file); the dcgm file was parsed by
    the config check, so a file that went bad since is logged and the defaults served.
    """
    if not names:
        return None
    unique = {PEER_VERSION[n]: n for n in reversed(names)}
    chosen = tuple(dict.fromkeys(n for n in names if n in unique.values()))
    path = (field_lists or {}).get("dcgm")
    return Compat(chosen, node_name(), cluster_name, _dcgm_fields(path) if path else None)


def _dcgm_fields(path: str) -> Selection | None:
    from exporter.outputs.compat.dcgm_csv import CsvError, load

    logger = log.get(output="prometheus", compat="dcgm", path=path)
    try:
        selection = load(path)
    except (OSError, CsvError) as exc:
        logger.error("compat field list unreadable, serving the defaults", error=str(exc))
        return None
    logger.info(
        "compat field list loaded",
        served=[f for f, _, _ in selection.fields],
        labels=list(selection.labels),
        unserved=dict(selection.unserved),
        type_notes=dict(selection.notes),
    )
    return selection
