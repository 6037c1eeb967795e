"""The configurable keys of the sections: their paths, names, types and defaults.

What flags, ``--help``, ``config show``, the generated docs and the loader all read
from the section dataclasses (:mod:`exporter.config.root` and below), never a copy.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from exporter.config.durations import format_duration
from exporter.config.root import Config

ENV_PREFIX = "ACCEL_EXPORTER_"

Path = tuple[str, ...]


@dataclass(frozen=True)
class Leaf:
    """A configurable key: its dotted path and type (for flags and docs)."""

    path: Path
    type: Any
    default: Any

    @property
    def dotted(self) -> str:
        """``web.listen_address``."""
        return ".".join(self.path)

    @property
    def flag(self) -> str:
        """``--web.listen-address``, ``--sources.ccl_ras.max-response-bytes``."""
        return flag_name(self.path)

    @property
    def env(self) -> str:
        """``ACCEL_EXPORTER_WEB__LISTEN_ADDRESS``."""
        return env_name(self.path)


def flag_name(path: Path) -> str:
    """The flag of a key: sections and sources spelled as in the file, the key in kebab case.

    So a source has one name everywhere (``ccl_ras`` in the file, the flags, the
    metrics and /status), and keys read like Prometheus flags (``--web.listen-address``).
    """
    return "--" + ".".join([*path[:-1], path[-1].replace("_", "-")])


def env_name(path: Path) -> str:
    """``ACCEL_EXPORTER_WEB__LISTEN_ADDRESS`` for ``("web", "listen_address")``."""
    return ENV_PREFIX + "__".join(part.upper() for part in path)


@functools.cache
def type_hints(cls: type) -> Mapping[str, Any]:
    """A section's field types, ``Annotated`` kept (durations, files, secrets); read-only.

    Cached: resolving the annotations (strings, under ``from __future__ import
    annotations``) was 569 calls and about 50 ms of every start, flags, loader and
    checks each asking again for the same few dozen classes.
    """
    return MappingProxyType(typing.get_type_hints(cls, include_extras=True))


def is_section(tp: Any) -> bool:
    """True for a section's type (a dataclass), not a value's."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(tp, False)``."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return tp, False


def leaves(cls: type = Config, prefix: Path = ()) -> Iterator[Leaf]:
    """Every configurable key under ``cls``, depth first, in declaration order."""
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, _ = unwrap_optional(hints[f.name])
        path = (*prefix, f.name)
        if is_section(tp):
            yield from leaves(tp, path)
        else:
            default: Any
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            yield Leaf(path, hints[f.name], default)


def key_help(cls: type, name: str) -> str:
    """A key's one-line description: its field's ``help`` (:func:`exporter.config.fields.setting`).

    Else the ``HELP`` dict of its class; the nearest class in the MRO that says
    something wins, so a subclass redeclaring a key without a description keeps
    its base's.
    """
    for klass in cls.__mro__:
        own = vars(klass)
        declared = own.get("__dataclass_fields__", {}).get(name)
        text = declared.metadata.get("help") if declared is not None else None
        text = text or own.get("HELP", {}).get(name)
        if text:
            return str(text)
    return ""


def describe_type(tp: Any) -> str:
    """A short human name for a field type (used in errors and docs)."""
    tp, optional = unwrap_optional(tp)
    origin = get_origin(tp)
    if origin is typing.Annotated:
        kind = get_args(tp)[1]
        name = {"duration": "duration", "file": "file path", "secret": "string"}[kind]
    elif origin is Literal:
        name = " | ".join(repr(a) if isinstance(a, str) else str(a).lower() for a in get_args(tp))
    elif origin in (Union, types.UnionType):
        name = " | ".join(describe_type(a) for a in get_args(tp))
    elif origin is list:
        name = f"list of {describe_type(get_args(tp)[0])}"
    elif origin is dict:
        name = f"mapping of {describe_type(get_args(tp)[1])}"
    elif is_section(tp):
        name = "mapping"
    else:
        name = getattr(tp, "__name__", str(tp))
    return name + (" or null" if optional else "")


def _annotation(tp: Any) -> str:
    inner, _ = unwrap_optional(tp)
    origin = get_origin(inner)
    if origin is dict:
        return _annotation(get_args(inner)[1])
    if origin is typing.Annotated:
        return str(get_args(inner)[1])
    return ""


def is_duration(tp: Any) -> bool:
    """True for :data:`~exporter.config.fields.Duration` fields (optional or not)."""
    return _annotation(tp) == "duration"


def is_secret(tp: Any) -> bool:
    """True for fields holding secrets (or mappings of them)."""
    return _annotation(tp) == "secret"


def format_default(value: Any, tp: Any) -> str:
    """Render a default the way a user would write it in YAML."""
    inner, _ = unwrap_optional(tp)
    if get_origin(inner) is typing.Annotated and get_args(inner)[1] == "duration":
        return format_duration(value) if isinstance(value, float) else "derived"
    if value is None:
        # Durations above are computed from other keys; any other null is simply not set
        # (the OTLP keys then fall back to OTEL_* variables, as docs/otlp.md explains).
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)
