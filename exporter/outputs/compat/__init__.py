"""Other exporters' series, built at render time from the same store view as ours.

``outputs.prometheus.compat`` names the exporters to imitate (``dcgm``:
NVIDIA's dcgm-exporter 4.x, ``amd``: AMD's device-metrics-exporter 1.5); their
series are appended to the exposition, so dashboards, alerts and autoscalers
written for them work unchanged. Nothing is read twice and nothing is cached
here: the exposition caches the whole body per view, as for our own series.
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
    from exporter.outputs.compat.amd import Selection

__all__ = ["CHOICES", "Compat", "Family", "encode", "from_config"]

CHOICES = ("dcgm", "amd")


@dataclass(frozen=True)
class Compat:
    """Which exporters to imitate, and the node-wide label values they carry."""

    names: tuple[str, ...]
    hostname: str
    cluster_name: str = ""
    # What outputs.prometheus.compat_fields' AMD config.json selects (None: no file).
    amd_selection: Selection | None = None

    def families(self, view: View, wanted: Sequence[str] | None = None) -> list[Family]:
        """The families of every configured exporter (``wanted`` names only, when given)."""
        found = [f for _, families in self.by_peer(view) for f in families]
        return found if wanted is None else [f for f in found if f.name in wanted]

    def by_peer(self, view: View) -> list[tuple[str, list[Family]]]:
        """Each configured exporter's name with its families, in configured order.

        A builder that fails is logged and skipped: the scrape still gets our own series.
        """
        # Their tables are imported by a daemon that serves them only (0.35 MiB of
        # every other daemon's idle memory, bench/idle.py).
        from exporter.outputs.compat import amd, dcgm

        builders: dict[str, Callable[[], list[Family]]] = {
            "dcgm": lambda: dcgm.build(view, self.hostname),
            "amd": lambda: amd.build(view, self.hostname, self.cluster_name, self.amd_selection),
        }
        out: list[tuple[str, list[Family]]] = []
        for name in self.names:
            try:
                found = builders[name]()
            except Exception as exc:
                log.get(output="prometheus").error(
                    "compat render failed", compat=name, error=repr(exc)
                )
                continue
            out.append((name, found))
        return out


def from_config(
    names: Sequence[str], cluster_name: str, amd_selection: Selection | None = None
) -> Compat | None:
    """The compat exposition the config asks for, or None (the default: nothing added)."""
    if not names:
        return None
    return Compat(tuple(dict.fromkeys(names)), node_name(), cluster_name, amd_selection)
