"""A users' collectors CSV served: its fields under their names, its types and help texts.

The selection (:class:`exporter.outputs.compat.dcgm_csv.Selection`) is what
``outputs.prometheus.compat_fields.dcgm`` names; the fields keep the unit and
labels of the release the entry serves (``dcgm`` / ``dcgm@<version>``), and the
ones we cannot serve are published once as ``accel_compat_field_unserved_info``
(:mod:`exporter.outputs.prometheus_setup`).
"""

from __future__ import annotations

from dataclasses import replace

from exporter.outputs.compat import dcgm
from exporter.outputs.compat.dcgm_csv import Selection
from exporter.outputs.compat.dcgm_fields import LABELS, REGISTRY
from exporter.outputs.compat.dcgm_versions import VERSIONS
from exporter.outputs.compat.family import Family
from exporter.store import View


def order(selection: Selection) -> tuple[dcgm.Field, ...]:
    """The registry's fields for the selection, with the file's type and help."""
    return tuple(
        replace(REGISTRY[name][0], kind=kind, help=help_ or REGISTRY[name][0].help)
        for name, kind, help_ in selection.fields
    )


def build(view: View, host: str, version: str, selection: Selection) -> list[Family]:
    """The selection's families for every NVIDIA device in ``view``."""
    labels = tuple((name, LABELS[name]) for name in selection.labels)
    # The release's own driver label is already on every series: not added twice.
    label = VERSIONS[version].driver_label
    labels = tuple(pair for pair in labels if pair[0] != label)
    return dcgm.build(view, host, version, order(selection), labels)
