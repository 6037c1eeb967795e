"""AMD device-metrics-exporter's ``config.json``, read as it ships: its GPU field list and labels.

The file is the exporter's own (``example/config.json`` in ROCm/device-metrics-exporter,
the GPU Operator's ConfigMap); only ``GPUConfig`` and ``CommonConfig.MetricsFieldPrefix``
concern a GPU's series, so the rest (NIC, IFOE, health thresholds, profiler) is not read.
As the exporter does (pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go, v1.5.1):

* ``Fields`` names GPUMetricField enum values, in any case; an empty or absent list
  means every field. A name listed twice is one field.
* ``Labels`` enables labels beyond the mandatory ones (:data:`MANDATORY`), which
  cannot be removed; the served label is the name in lower case.
* ``CustomLabels`` adds constant labels to every series (at most 10; of the GPU labels
  only ``CLUSTER_NAME`` may be set there).
* ``MetricsFieldPrefix`` is prepended to every series name when it is a valid
  Prometheus name (an invalid one is ignored, as there).

Errors name the file and the line: the JSON decoder's for malformed JSON, the line
of the key for a value of the wrong shape.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.outputs.compat.amd import Selection

# GPUMetricLabel and MetricLabel names always written by AMD's exporter 1.5.
MANDATORY = (
    "gpu_id",
    "card_model",
    "gpu_partition_id",
    "gpu_compute_partition_type",
    "gpu_memory_partition_type",
    "deployment_mode",
    "serial_number",
    "pod",
    "namespace",
    "container",
    "job_id",
    "job_user",
    "job_partition",
    "hostname",
)
# The labels ``Labels`` may add.
OPTIONAL = (
    "gpu_uuid",
    "cluster_name",
    "card_series",
    "card_vendor",
    "driver_version",
    "vbios_version",
    "pod_uuid",
    "kfd_process_id",
)
# Labels AMD's exporter writes that we have no value for, and why.
NOT_WRITTEN = {
    "deployment_mode": "not read: we do not tell bare metal from an SR-IOV host or guest",
    "pod_uuid": "not read: the kubelet's pod resources API gives no pod UID",
    "kfd_process_id": "per-process series are not served in compat (processes: true gives"
    " accel_process_* per pid)",
}
# GPU labels that CustomLabels may not set (all of GPUMetricLabel but CLUSTER_NAME).
_NOT_CUSTOM = frozenset(
    {
        "gpu_uuid",
        "gpu_id",
        "gpu_partition_id",
        "gpu_compute_partition_type",
        "gpu_memory_partition_type",
        "kfd_process_id",
        "deployment_mode",
    }
)
MAX_CUSTOM_LABELS = 10
_PROMETHEUS_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class FieldFileError(ValueError):
    """The file cannot be used; the message names the file and the line."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path, self.line, self.problem = path, line, problem


@dataclass(frozen=True)
class AmdSelection:
    """What one config.json selects for the GPU series."""

    path: str
    # GPUMetricField names, upper case, each once, in file order; () is the default set.
    fields: tuple[str, ...] = ()
    # Labels written: the mandatory ones, then those ``Labels`` enables (lower case).
    labels: tuple[str, ...] = MANDATORY
    # CustomLabels, lower-case names, in file order.
    custom: tuple[tuple[str, str], ...] = ()
    prefix: str = ""
    # What the file asks that is not done, one line each (logged once by the caller).
    notes: tuple[str, ...] = ()

    def selection(self) -> Selection:
        """What the compat builder takes (compat.amd.build)."""
        from exporter.outputs.compat.amd import Selection

        return Selection(self.fields, self.labels, self.custom, self.prefix)


def _line_of(text: str, key: str) -> int:
    """The line of ``"key"`` in ``text`` (1 when it is not found)."""
    at = text.find(f'"{key}"')
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _strings(text: str, path: str, key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        line = _line_of(text, key)
        raise FieldFileError(path, line, f"GPUConfig.{key} must be a list of strings")
    return value


def parse(text: str, path: str) -> AmdSelection:
    """The selection of one config.json's text (``path`` names it in errors)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FieldFileError(path, exc.lineno, f"malformed JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise FieldFileError(path, 1, "must be a JSON object (device-metrics-exporter's config)")
    gpu = doc.get("GPUConfig") or {}
    if not isinstance(gpu, dict):
        raise FieldFileError(path, _line_of(text, "GPUConfig"), "GPUConfig must be an object")
    listed = _strings(text, path, "Fields", gpu.get("Fields"))
    fields = tuple(dict.fromkeys(f.upper() for f in listed))
    notes: list[str] = []
    labels = list(MANDATORY)
    for name in _strings(text, path, "Labels", gpu.get("Labels")):
        label = name.lower()
        if label in OPTIONAL and label not in labels:
            labels.append(label)
        elif label not in labels:
            notes.append(f"label {name}: not a GPU label of AMD's exporter (ignored there)")
    custom_doc = gpu.get("CustomLabels") or {}
    if not isinstance(custom_doc, dict) or not all(isinstance(v, str) for v in custom_doc.values()):
        raise FieldFileError(
            path, _line_of(text, "CustomLabels"), "GPUConfig.CustomLabels must map names to strings"
        )
    custom: list[tuple[str, str]] = []
    for name, value in custom_doc.items():
        label = name.lower()
        if label in _NOT_CUSTOM or not _LABEL_NAME.fullmatch(label):
            notes.append(f"custom label {name}: cannot be set there (ignored, as there)")
        elif len(custom) >= MAX_CUSTOM_LABELS:
            notes.append(f"custom label {name}: more than {MAX_CUSTOM_LABELS} (ignored, as there)")
        else:
            custom.append((label, value))
    common = doc.get("CommonConfig") or {}
    prefix = common.get("MetricsFieldPrefix", "") if isinstance(common, dict) else ""
    if not isinstance(prefix, str) or (prefix and not _PROMETHEUS_NAME.fullmatch(prefix)):
        notes.append(f"MetricsFieldPrefix {prefix!r}: not a Prometheus name (no prefix, as there)")
        prefix = ""
    for label in labels:
        if label in NOT_WRITTEN:
            notes.append(f"label {label}: {NOT_WRITTEN[label]}")
    return AmdSelection(path, fields, tuple(labels), tuple(custom), prefix, tuple(notes))


def read(path: str) -> AmdSelection:
    """The selection of the config.json at ``path`` (:class:`FieldFileError` when unusable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise FieldFileError(path, 0, f"cannot read: {exc}") from None
    return parse(text, path)


UNKNOWN = "not a GPUMetricField of device-metrics-exporter 1.5 (ignored there too)"


def unserved(selection: Selection) -> list[tuple[str, str]]:
    """(field, reason) for every listed field compat does not serve, in file order.

    The reasons are the migration table's (docs/migrating.md), from
    :mod:`exporter.outputs.compat.amd_unserved`.
    """
    from exporter.outputs.compat.amd_unserved import AMD_FIELDS, unserved_reason

    known = frozenset(AMD_FIELDS)
    out = []
    for field in selection.fields:
        if field not in known:
            out.append((field, UNKNOWN))
        elif why := unserved_reason(field):
            out.append((field, why))
    return out
