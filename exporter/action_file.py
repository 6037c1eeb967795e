"""Action mappings people write: the checks of one entry, and a site's AFID table file.

One entry maps a code to an action, either as the action word alone (``none``) or
as a mapping ``{action, scope, escalation, escalation_scope, detail}`` of the one
vocabulary (:data:`exporter.actions.ACTIONS`, :data:`exporter.actions.SCOPES`). The
config's overrides (``health.xid_actions``, ``health.afid_actions``) and the file
``health.afid_table`` names share these checks.

The file is a site's own AMD-supplied AFID mapping (AMD's "SAG-derived NPD ConfigMap"
is not public: "contact the AMD support team"), YAML::

    reference: AMD SAG NPD ConfigMap, 2026-03   # optional: named in every finding
    afids:
      "24": none
      "18": {action: inspect_hardware, scope: baseboard, escalation: replace_device,
             escalation_scope: baseboard, detail: reseat the GPU tray}

It replaces the inferred join of :mod:`exporter.afids` (see
:func:`exporter.actions.afid_action`). A problem names the file, the line and the
key (``table.yaml:7: afids.18.scope: must be one of ...``), from PyYAML's marks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from exporter.actions import ACTIONS, SCOPES, Advice

# The keys of an entry's mapping form, in the order they are written.
ENTRY_KEYS = ("action", "scope", "escalation", "escalation_scope", "detail")
# A table file larger than this is no mapping of a few hundred codes.
MAX_BYTES = 1 << 20


class ActionFileError(ValueError):
    """A table file that cannot be used; the message names the file, line and key."""


def entry_problems(
    action: str, scope: str = "device", escalation: str = "", escalation_scope: str = ""
) -> list[tuple[str, str]]:
    """(key, problem) for each word of one entry outside the vocabulary."""
    out: list[tuple[str, str]] = []
    if action not in ACTIONS:
        out.append(("action", f"must be one of {', '.join(ACTIONS)}"))
    if scope not in SCOPES:
        out.append(("scope", f"must be one of {', '.join(SCOPES)}"))
    if escalation and escalation not in ACTIONS:
        out.append(("escalation", f"must be empty or one of {', '.join(ACTIONS)}"))
    if escalation_scope and escalation_scope not in SCOPES:
        out.append(("escalation_scope", f"must be empty or one of {', '.join(SCOPES)}"))
    return out


@dataclass(frozen=True)
class SiteTable:
    """A site's AFID table: code -> advice (provenance ``site_table``), and whence."""

    path: str
    advice: dict[str, Advice]
    reference: str


def _where(path: str, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def _scalar(path: str, node: yaml.Node, key: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null":
        raise ActionFileError(f"{_where(path, node)}: {key}: must be a string")
    return str(node.value)


def _entry(path: str, code: str, node: yaml.Node, reference: str) -> Advice:
    """One code's advice from its node (a word, or a mapping of ENTRY_KEYS)."""
    key = f"afids.{code}"
    fields = {"scope": "device", "escalation": "", "escalation_scope": "", "detail": ""}
    marks: dict[str, yaml.Node] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            name = str(key_node.value)
            if name not in ENTRY_KEYS:
                raise ActionFileError(
                    f"{_where(path, key_node)}: {key}.{name}: unknown key"
                    f" (one of {', '.join(ENTRY_KEYS)})"
                )
            if name in marks:
                raise ActionFileError(f"{_where(path, key_node)}: {key}.{name}: key given twice")
            fields[name] = _scalar(path, value_node, f"{key}.{name}")
            marks[name] = value_node
        if "action" not in fields:
            raise ActionFileError(f"{_where(path, node)}: {key}: needs an action")
    else:
        fields["action"] = _scalar(path, node, key)
    for name, problem in entry_problems(
        fields["action"], fields["scope"], fields["escalation"], fields["escalation_scope"]
    ):
        at = marks.get(name, node)
        shown = f"{key}.{name}" if isinstance(node, yaml.MappingNode) else key
        raise ActionFileError(f"{_where(path, at)}: {shown}: {problem}, not {fields[name]!r}")
    return Advice(
        fields["action"],
        fields["scope"],
        fields["escalation"],
        fields["detail"],
        "site_table",
        reference,
        fields["escalation_scope"],
    )


def parse(text: str, path: str) -> SiteTable:
    """The table in ``text`` (read from ``path``, named in problems); ActionFileError."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ActionFileError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ActionFileError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(root, yaml.MappingNode):
        raise ActionFileError(f"{path}:1: must be a mapping with the key afids")
    reference = f"site AFID table {path}"
    table: yaml.Node | None = None
    for key_node, value_node in root.value:
        name = str(key_node.value)
        if name == "reference":
            reference = f"{_scalar(path, value_node, 'reference')} ({path})"
        elif name == "afids":
            table = value_node
        else:
            raise ActionFileError(
                f"{_where(path, key_node)}: {name}: unknown key (reference or afids)"
            )
    if not isinstance(table, yaml.MappingNode):
        at = _where(path, table) if table is not None else f"{path}:1"
        raise ActionFileError(f"{at}: afids: must be a mapping of AFID -> action")
    out: dict[str, Advice] = {}
    for key_node, value_node in table.value:
        code = str(key_node.value)
        if not code.isdigit():
            raise ActionFileError(
                f"{_where(path, key_node)}: afids.{code}: is not an AFID (a whole number)"
            )
        code = str(int(code))
        if code in out:
            raise ActionFileError(f"{_where(path, key_node)}: afids.{code}: key given twice")
        out[code] = _entry(path, code, value_node, reference)
    return SiteTable(path, out, reference)


def load(path: str) -> SiteTable:
    """Read and parse the table file at ``path``; ActionFileError naming what is wrong."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ActionFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ActionFileError(f"{path}: larger than {MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ActionFileError(f"{path}: not UTF-8 text: {exc.reason}") from None
    return parse(text, path)


def advice_of(value: Any, provenance: str, reference: str = "") -> Advice:
    """The advice of one config override (a word, or an object with ENTRY_KEYS)."""
    if isinstance(value, str):
        return Advice(value, provenance=provenance, reference=reference)
    return Advice(
        value.action,
        value.scope,
        value.escalation,
        value.detail,
        provenance,
        reference,
        value.escalation_scope,
    )
