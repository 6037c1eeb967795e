"""Other exporters' series, built at render time from the same store view as ours.

``outputs.prometheus.compat`` names the exporters to imitate (``dcgm``:
NVIDIA's dcgm-exporter 4.8 names, ``dcgm@4.8``/``dcgm@4.9``/``dcgm@4.10`` a pinned
release, ``amd``: AMD's device-metrics-exporter 1.5); their
series are appended to the exposition, so dashboards, alerts and autoscalers
written for them work unchanged. Nothing is read twice and nothing is cached
here: the exposition caches the whole body per view, as for our own series.
What is served (``accel_compat_info``) and which listed fields are not
(``accel_compat_field_unserved_info``) are catalog families of our own, published
by :mod:`exporter.outputs.prometheus_setup`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter import log
from exporter.outputs.compat.family import Family, encode
from exporter.outputs.compat.view import node_name
from exporter.store import View

if TYPE_CHECKING:
    from exporter.outputs.compat import amd as amd_compat
    from exporter.outputs.compat import dcgm_csv

__all__ = ["CHOICES", "PEER_VERSION", "Compat", "Family", "encode", "from_config"]

CHOICES = ("dcgm", "dcgm@4.8", "dcgm@4.9", "dcgm@4.10", "amd")
# The (peer, version) each entry serves (accel_compat_info).
PEER_VERSION = {
    "dcgm": ("dcgm", "4.8"),
    "dcgm@4.8": ("dcgm", "4.8"),
    "dcgm@4.9": ("dcgm", "4.9"),
    "dcgm@4.10": ("dcgm", "4.10"),
    "amd": ("amd", "1.5"),
}


@dataclass(frozen=True)
class Compat:
    """Which exporters to imitate, and the node-wide label values they carry."""

    names: tuple[str, ...]
    hostname: str
    cluster_name: str = ""
    # What outputs.prometheus.compat_fields' AMD config.json selects (None: no file).
    amd_selection: amd_compat.Selection | None = None
    # The users' dcgm-exporter collectors CSV (compat_fields.dcgm), None: the defaults.
    dcgm_fields: dcgm_csv.Selection | None = None

    def served(self) -> list[tuple[str, str]]:
        """The (peer, version) pairs served, in configured order."""
        return list(dict.fromkeys(PEER_VERSION[n] for n in self.names))

    def families(self, view: View, wanted: Sequence[str] | None = None) -> list[Family]:
        """The families of every configured exporter (``wanted`` names only, when given)."""
        found = [f for _, families in self.by_peer(view) for f in families]
        return found if wanted is None else [f for f in found if f.name in wanted]

    def by_peer(self, view: View) -> list[tuple[str, list[Family]]]:
        """Each configured exporter's name with its families, in configured order.

        With two dcgm versions the newest is built first: a name both serve (same unit,
        checked at config load) is written once, with the newer release's labels. A
        builder that fails is logged and skipped: the scrape still gets our own series.
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
            "amd": lambda: amd.build(view, self.hostname, self.cluster_name, self.amd_selection),
        }
        builders.update({e: dcgm_of(PEER_VERSION[e][1]) for e in CHOICES if e != "amd"})
        built: dict[str, list[Family]] = {}
        served: set[str] = set()
        for name in sorted(self.names, key=_newest_first):
            try:
                found = [f for f in builders[name]() if f.name not in served]
            except Exception as exc:
                log.get(output="prometheus").error(
                    "compat render failed", compat=name, error=repr(exc)
                )
                continue
            served.update(f.name for f in found)
            built[name] = found
        return [(name, built[name]) for name in self.names if name in built]


def _newest_first(entry: str) -> tuple[int, ...]:
    peer, version = PEER_VERSION[entry]
    return (0 if peer == "dcgm" else 1, *(-int(p) for p in version.split(".")))


def from_config(
    names: Sequence[str],
    cluster_name: str,
    amd_selection: amd_compat.Selection | None = None,
    dcgm_fields: dcgm_csv.Selection | None = None,
) -> Compat | None:
    """The compat exposition the config asks for, or None (the default: nothing added).

    ``dcgm`` and ``dcgm@4.8`` are one vocabulary: asked for both, it is served once
    (under the first spelling).
    """
    if not names:
        return None
    first: dict[tuple[str, str], str] = {}
    for name in names:
        first.setdefault(PEER_VERSION[name], name)
    chosen = tuple(dict.fromkeys(first.values()))
    return Compat(chosen, node_name(), cluster_name, amd_selection, dcgm_fields)
