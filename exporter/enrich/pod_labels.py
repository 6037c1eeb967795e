"""The allowlisted labels of this node's pods, from a pod listing (:func:`exporter.kube.list_pods`).

Pure: the listing's items in, :class:`PodLabels` out. An item without a namespace
and name is skipped; a label value that is not a string is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PodLabels:
    """The allowlisted labels of one pod (keys the pod does not have are left out)."""

    namespace: str
    pod: str
    labels: Mapping[str, str]


def parse_pods(items: Sequence[Any], keys: Sequence[str]) -> list[PodLabels]:
    """The allowlisted labels of each item of a PodList or PartialObjectMetadataList."""
    wanted = frozenset(keys)
    out = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            continue
        labels = meta.get("labels")
        found = (
            {k: v for k, v in labels.items() if k in wanted and isinstance(v, str)}
            if isinstance(labels, dict)
            else {}
        )
        out.append(PodLabels(namespace, name, found))
    return out
