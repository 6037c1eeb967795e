"""A compat family: another exporter's name, type, help and labels, written as that exporter does.

Catalog rows (:class:`~exporter.catalog.MetricSpec`) hold our own naming rules
(snake_case, base units, ``_total`` on counters); dcgm-exporter's and AMD's
families break them by design (``DCGM_FI_DEV_GPU_TEMP``, ``modelName``, counters
without ``_total``), so they are written here, with the escaping and number
formatting of :mod:`exporter.outputs.text_format`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.outputs.text_format import OPENMETRICS, go_float, label_value

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One family of another exporter: its samples as (labels, value), in order."""

    name: str
    kind: str  # "gauge" or "counter", as the original declares it
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, labels: Sequence[tuple[str, str]], value: float) -> None:
        """One sample."""
        self.samples.append((tuple(labels), value))


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{label_value(v)}"' for k, v in labels) + "}"


def encode(families: Iterable[Family], fmt: str) -> bytes:
    """The families with samples, in ``fmt``.

    The originals serve only the 0.0.4 text format, where a counter's samples
    carry the family name as is. OpenMetrics requires ``_total`` on counter
    samples, so there a counter whose name lacks it is typed ``unknown``: the
    series keep their names, which is what queries see.
    """
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        kind = family.kind
        doc = family.help.replace("\\", r"\\").replace("\n", r"\n")
        if fmt == OPENMETRICS:
            doc = doc.replace('"', r"\"")
            if kind == "counter" and not family.name.endswith("_total"):
                kind = "unknown"
        out.append(f"# HELP {family.name} {doc}\n# TYPE {family.name} {kind}\n")
        name = family.name
        out.extend(
            f"{name}{_labels(labels)} {go_float(value)}\n" for labels, value in family.samples
        )
    return "".join(out).encode()
