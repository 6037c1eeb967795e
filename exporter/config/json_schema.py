"""The config schema as JSON Schema (draft 7), for the Helm chart's ``config:`` value.

Generated, never hand-written (scripts/gen_docs.py writes it into
helm/accel-exporter/values.schema.json), so a typo inside ``config:`` fails
``helm install`` with the key's path instead of crash-looping every pod.
Cross-field rules (cert and key together, bcrypt hashes) stay the daemon's.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from exporter.config.keys import key_help, type_hints
from exporter.config.root import Config


def of_type(tp: Any) -> dict[str, Any]:
    """The JSON Schema of one field type."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        options = [of_type(a) for a in args if a is not type(None)]
        if type(None) in args:
            options.append({"type": "null"})
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is typing.Annotated:
        base, kind = get_args(tp)
        if kind == "duration":
            # Written with a unit ("15s"): the loader refuses a bare number.
            return {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"}
        return of_type(base)
    if origin is Literal:
        return {"enum": list(get_args(tp))}
    if origin is list:
        return {"type": "array", "items": of_type(get_args(tp)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": of_type(get_args(tp)[1])}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return of_section(tp)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no JSON Schema for config type {tp!r}")


def of_section(cls: type) -> dict[str, Any]:
    """An object with exactly the section's keys, each described."""
    hints = type_hints(cls)
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        sub = of_type(hints[f.name])
        text = key_help(cls, f.name)
        properties[f.name] = {"description": text, **sub} if text else sub
    for old, new in getattr(cls, "ALIASES", {}).items():
        properties[old] = {**properties[new], "description": f"renamed to {new}; still read"}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    out["additionalProperties"] = False
    doc = (cls.__doc__ or "").strip().splitlines()
    if doc:
        out["description"] = doc[0]
    return out


def config_schema() -> dict[str, Any]:
    """The whole ``config:`` value."""
    return of_section(Config)
