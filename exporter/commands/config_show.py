"""``accel-exporter config show``: the effective configuration, as ``config check`` reads it."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TextIO

import yaml

from exporter.config.keys import format_default, is_duration, is_secret, type_hints

REDACTED = "[redacted]"


def tree(node: Any) -> Any:
    """Plain YAML data for a config dataclass: durations spelled, secrets redacted.

    An optional section left unset (``web.tls``) is written as ``null``, which the
    loader reads back as unset, rather than as a mapping of nulls it would reject.
    """
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    hints = type_hints(type(node))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        tp = hints[f.name]
        if is_secret(tp) and value:
            value = {k: REDACTED for k in value} if isinstance(value, dict) else REDACTED
        elif is_duration(tp) and isinstance(value, float):
            value = format_default(value, tp)
        else:
            value = tree(value)
        out[f.name] = value
    return out


def run(config: Any, out: TextIO | None = None) -> int:
    """Print the effective config as YAML (to ``out``, else stdout as it is now); exit 0."""
    (out or sys.stdout).write(yaml.safe_dump(tree(config), sort_keys=False))
    return 0
