"""Plain data (from YAML, environment or flags) -> section dataclasses, every problem collected.

Each value is converted by the type its key declares (:mod:`exporter.config.fields`
names the types understood); a section's ``check()`` runs on what converted, so one
mistake does not hide another, and ``resolved()`` fills the defaults derived from others.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from exporter.config.durations import parse_duration
from exporter.config.keys import (
    Path,
    describe_type,
    is_secret,
    is_section,
    type_hints,
    unwrap_optional,
)
from exporter.suggest import closest, hint


class _Invalid:
    """Marker for a value that failed conversion (a problem was recorded)."""


INVALID = _Invalid()


class Problems:
    """Collects problems with the best known origin of each key."""

    def __init__(self, origins: dict[Path, str]) -> None:
        self.origins = origins
        self.items: list[str] = []
        self.notes: list[str] = []

    def add(self, path: Path, message: str) -> None:
        """A problem with the key at ``path``, prefixed with where that key was given."""
        self.items.append(self._where(path) + message)

    def note(self, path: Path, message: str) -> None:
        """Not a problem, but worth a warning (an old key name that still works)."""
        self.notes.append(self._where(path) + message)

    def _where(self, path: Path) -> str:
        key = ".".join(path) or "(top level)"
        origin = ""
        for cut in range(len(path), -1, -1):
            if path[:cut] in self.origins:
                origin = self.origins[path[:cut]]
                break
        return f"{origin + ': ' if origin else ''}{key}: "


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _shown(value: Any, secret: bool) -> str:
    """How a bad value appears in an error: never at all when it is a secret."""
    return "(a hidden value)" if secret else repr(value)


def convert(value: Any, tp: Any, path: Path, problems: Problems, secret: bool = False) -> Any:
    """``value`` as type ``tp``, or :data:`INVALID` with the problem added (secrets unshown)."""
    secret = secret or is_secret(tp)
    tp_inner, optional = unwrap_optional(tp)
    if value is None or (isinstance(value, str) and optional and value.lower() in ("null", "~")):
        if optional:
            return None
        if is_section(tp_inner):
            value = {}
        else:
            problems.add(path, f"needs a value ({describe_type(tp)})")
            return INVALID
    tp = tp_inner
    origin = get_origin(tp)

    if origin is typing.Annotated:
        return _annotated(value, tp, path, problems, secret)

    if origin is Literal:
        options = get_args(tp)
        if value in options and type(value) in {type(o) for o in options}:
            return value
        problems.add(path, f"must be one of {describe_type(tp)}, not {_shown(value, secret)}")
        return INVALID

    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            scratch = Problems({})
            out = convert(value, arg, path, scratch)
            if out is not INVALID:
                return out
        problems.add(path, f"must be {describe_type(tp)}, not {_shown(value, secret)}")
        return INVALID

    if origin is list:
        value = _collection(value, list, path, problems)
        if value is INVALID:
            return INVALID
        (item_tp,) = get_args(tp)
        items = [convert(v, item_tp, (*path, str(i)), problems) for i, v in enumerate(value)]
        return INVALID if any(i is INVALID for i in items) else items

    if origin is dict:
        value = _collection(value, dict, path, problems, secret)
        if value is INVALID:
            return INVALID
        _, val_tp = get_args(tp)
        out_map = {}
        for k, v in value.items():
            out_map[str(k)] = convert(v, val_tp, (*path, str(k)), problems)
        return INVALID if any(v is INVALID for v in out_map.values()) else out_map

    if is_section(tp):
        return _convert_dataclass(value, tp, path, problems)

    if tp in (bool, int, float, str):
        return _scalar(value, tp, path, problems, secret)
    raise TypeError(f"config schema uses unsupported type {tp!r} at {'.'.join(path)}")


def _annotated(value: Any, tp: Any, path: Path, problems: Problems, secret: bool) -> Any:
    """A value of an ``Annotated`` type: a duration, or a file that must be readable."""
    base, kind = get_args(tp)
    if kind == "duration":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            problems.add(path, "must be a duration like 250ms, 15s or 1m")
            return INVALID
        if not isinstance(value, str):
            problems.add(path, f"duration {value} needs a unit (e.g. {value}s or {value}ms)")
            return INVALID
        try:
            return parse_duration(value)
        except ValueError as exc:
            problems.add(path, str(exc))
            return INVALID
    text = convert(value, base, path, problems, secret)
    unreadable = (
        isinstance(text, str) and text and not (os.path.isfile(text) and os.access(text, os.R_OK))
    )
    if kind == "file" and unreadable:
        problems.add(path, f"cannot read file {text!r}: {_unreadable_why(str(text))}")
        return INVALID
    return text


def _scalar(value: Any, tp: Any, path: Path, problems: Problems, secret: bool) -> Any:
    """A bool, int, float or str, from YAML or from env/flag text."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        problems.add(path, f"must be true or false, not {_shown(value, secret)}")
        return INVALID
    if tp is int or tp is float:
        # An int is a float too (YAML writes 5, not 5.0); a bool is neither.
        taken = (int, float) if tp is float else (int,)
        if isinstance(value, taken) and not isinstance(value, bool):
            return tp(value)
        if isinstance(value, str):
            try:
                return tp(value.strip())
            except ValueError:
                pass
        what = "a number" if tp is float else "an integer"
        problems.add(path, f"must be {what}, not {_shown(value, secret)}")
        return INVALID
    # tp is str: convert calls this for these four types only.
    if isinstance(value, str):
        return value
    problems.add(
        path, f"must be a string, not {type(value).__name__} {_shown(value, secret)} (quote it)"
    )
    return INVALID


def _collection(
    value: Any, kind: type, path: Path, problems: Problems, secret: bool = False
) -> Any:
    """A list or dict from YAML, or parsed from env/flag text; INVALID otherwise."""
    if isinstance(value, str):
        value = _parse_text_collection(value, kind, path, problems, secret)
        if value is INVALID:
            return INVALID
    if not isinstance(value, kind):
        noun = "a list" if kind is list else "a mapping"
        problems.add(path, f"must be {noun}, not {type(value).__name__}")
        return INVALID
    return value


def _parse_text_collection(
    text: str, kind: type, path: Path, problems: Problems, secret: bool = False
) -> Any:
    stripped = text.strip()
    if kind is list:
        # A YAML flow list ("[a, b]") or a comma-separated one ("a, b"); an item like
        # "[::1]:28028" also starts with "[", so fall back to commas when YAML disagrees.
        if stripped.startswith("[") and stripped.endswith("]"):
            try:
                parsed = yaml.safe_load(stripped)
            except yaml.YAMLError:
                parsed = None
            if isinstance(parsed, list):
                return parsed
        return [part.strip() for part in stripped.split(",") if part.strip()]
    try:
        value = yaml.safe_load(stripped) if stripped else kind()
    except yaml.YAMLError as exc:
        # One line, and the text itself only when it is not a secret (headers, users).
        where = ""
        problem = str(getattr(exc, "problem", "") or "not valid YAML")
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at column {mark.column + 1}"
        shown = "" if secret else f" {text!r}"
        problems.add(path, f"cannot parse{shown}: {problem}{where}")
        return INVALID
    return kind() if value is None else value


def _unreadable_why(path: str) -> str:
    """Why a file key's file cannot be read."""
    if not os.path.lexists(path):
        return "it does not exist"
    if os.path.isdir(path):
        return "it is a directory"
    if not os.path.exists(path):
        return "it is a dangling symbolic link"
    return "permission denied"


def unknown_hint(cls: type, key: str, names: list[str]) -> str:
    """`` (renamed to ...)`` for a key a section declares renamed, else a close match."""
    renamed: dict[str, str] = getattr(cls, "RENAMED", {})
    if key in renamed:
        return f" (renamed to {renamed[key]})"
    hints: dict[str, str] = getattr(cls, "HINTS", {})
    if key in hints:
        return f" ({hints[key]})"
    close = close_key(cls, key, names)
    return hint(repr(close)) if close else ""


def close_key(cls: type, key: str, names: list[str]) -> str:
    """The key of ``cls`` that a mistyped ``key`` most likely meant ("" if none)."""
    return closest(key, names, getattr(cls, "SYNONYMS", None))


def _convert_dataclass(value: Any, cls: type, path: Path, problems: Problems) -> Any:
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping, not {type(value).__name__}")
        return INVALID
    hints = type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    bad = False
    aliases: dict[str, str] = getattr(cls, "ALIASES", {})
    for key, item in value.items():
        key = str(key)
        if key in aliases:
            new = aliases[key]
            if new in value:
                problems.add((*path, key), f"renamed to {new}, which is also given; keep {new}")
                bad = True
                continue
            problems.note((*path, key), f"renamed to {'.'.join((*path, new))}; read as such")
            key = new
        if key not in names:
            problems.add((*path, key), f"unknown key{unknown_hint(cls, key, names)}")
            bad = True
            continue
        converted = convert(item, hints[key], (*path, key), problems)
        if converted is INVALID:
            bad = True
        else:
            kwargs[key] = converted
    # Sections left out still go through conversion, so their derived defaults
    # (timeouts, stale_after) are filled in exactly as for sections written out.
    for f in dataclasses.fields(cls):
        inner, optional = unwrap_optional(hints[f.name])
        given = f.name in value or any(aliases.get(str(k)) == f.name for k in value)
        if not given and not optional and is_section(inner):
            kwargs[f.name] = convert({}, inner, (*path, f.name), problems)
    # Cross-field checks still run on the keys that did convert, so that one
    # mistake does not hide another; failed keys keep their defaults here.
    failed = {aliases.get(str(k), str(k)) for k in value} - set(kwargs)
    instance = cls(**kwargs)
    check = getattr(instance, "check", None)
    for key, message in check() if check is not None else []:
        if key.split(".")[0] not in failed:
            problems.add((*path, *key.split(".")), message)
            bad = True
    if bad:
        return INVALID
    resolved = getattr(instance, "resolved", None)
    return resolved() if resolved is not None else instance
