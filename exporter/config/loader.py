"""YAML file + environment + flags -> one validated :class:`Config`.

Precedence: flags over environment over file over defaults. Every problem is
collected and reported at once, each naming its key and where it came from
(``file:line``, the environment variable, or the flag).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from exporter.config.durations import format_duration, parse_duration
from exporter.config.root import Config
from exporter.config.web_config import read_web_config
from exporter.errors import ConfigError
from exporter.suggest import closest, hint

ENV_PREFIX = "ACCEL_EXPORTER_"

Path = tuple[str, ...]


class _Invalid:
    """Marker for a value that failed conversion (a problem was recorded)."""


INVALID = _Invalid()


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


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return tp, False


def leaves(cls: type = Config, prefix: Path = ()) -> Iterator[Leaf]:
    """Every configurable key under ``cls``, depth first, in declaration order."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp, _ = _unwrap_optional(hints[f.name])
        path = (*prefix, f.name)
        if _is_dataclass_type(tp):
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


def describe_type(tp: Any) -> str:
    """A short human name for a field type (used in errors and docs)."""
    tp, optional = _unwrap_optional(tp)
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
    elif _is_dataclass_type(tp):
        name = "mapping"
    else:
        name = getattr(tp, "__name__", str(tp))
    return name + (" or null" if optional else "")


def _annotation(tp: Any) -> str:
    inner, _ = _unwrap_optional(tp)
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
    inner, _ = _unwrap_optional(tp)
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


class _Problems:
    """Collects problems with the best known origin of each key."""

    def __init__(self, origins: dict[Path, str]) -> None:
        self.origins = origins
        self.items: list[str] = []
        self.notes: list[str] = []

    def add(self, path: Path, message: str) -> None:
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


def _convert(value: Any, tp: Any, path: Path, problems: _Problems, secret: bool = False) -> Any:
    secret = secret or is_secret(tp)
    tp_inner, optional = _unwrap_optional(tp)
    if value is None or (isinstance(value, str) and optional and value.lower() in ("null", "~")):
        if optional:
            return None
        if _is_dataclass_type(tp_inner):
            value = {}
        else:
            problems.add(path, f"needs a value ({describe_type(tp)})")
            return INVALID
    tp = tp_inner
    origin = get_origin(tp)

    if origin is typing.Annotated:
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
        text = _convert(value, base, path, problems, secret)
        unreadable = (
            isinstance(text, str)
            and text
            and not (os.path.isfile(text) and os.access(text, os.R_OK))
        )
        if kind == "file" and unreadable:
            problems.add(path, f"cannot read file {text!r}: {_unreadable_why(str(text))}")
            return INVALID
        return text

    if origin is Literal:
        options = get_args(tp)
        if value in options and type(value) in {type(o) for o in options}:
            return value
        problems.add(path, f"must be one of {describe_type(tp)}, not {_shown(value, secret)}")
        return INVALID

    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            scratch = _Problems({})
            out = _convert(value, arg, path, scratch)
            if out is not INVALID:
                return out
        problems.add(path, f"must be {describe_type(tp)}, not {_shown(value, secret)}")
        return INVALID

    if origin is list:
        value = _collection(value, list, path, problems)
        if value is INVALID:
            return INVALID
        (item_tp,) = get_args(tp)
        items = [_convert(v, item_tp, (*path, str(i)), problems) for i, v in enumerate(value)]
        return INVALID if any(i is INVALID for i in items) else items

    if origin is dict:
        value = _collection(value, dict, path, problems, secret)
        if value is INVALID:
            return INVALID
        _, val_tp = get_args(tp)
        out_map = {}
        for k, v in value.items():
            out_map[str(k)] = _convert(v, val_tp, (*path, str(k)), problems)
        return INVALID if any(v is INVALID for v in out_map.values()) else out_map

    if _is_dataclass_type(tp):
        return _convert_dataclass(value, tp, path, problems)

    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        problems.add(path, f"must be true or false, not {_shown(value, secret)}")
        return INVALID
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        problems.add(path, f"must be an integer, not {_shown(value, secret)}")
        return INVALID
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        problems.add(path, f"must be a number, not {_shown(value, secret)}")
        return INVALID
    if tp is str:
        if isinstance(value, str):
            return value
        problems.add(
            path, f"must be a string, not {type(value).__name__} {_shown(value, secret)} (quote it)"
        )
        return INVALID
    raise TypeError(f"config schema uses unsupported type {tp!r} at {'.'.join(path)}")


def _collection(
    value: Any, kind: type, path: Path, problems: _Problems, secret: bool = False
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
    text: str, kind: type, path: Path, problems: _Problems, secret: bool = False
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


def _unknown_hint(cls: type, key: str, names: list[str]) -> str:
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


def _convert_dataclass(value: Any, cls: type, path: Path, problems: _Problems) -> Any:
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping, not {type(value).__name__}")
        return INVALID
    hints = _hints(cls)
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
            problems.add((*path, key), f"unknown key{_unknown_hint(cls, key, names)}")
            bad = True
            continue
        converted = _convert(item, hints[key], (*path, key), problems)
        if converted is INVALID:
            bad = True
        else:
            kwargs[key] = converted
    # Sections left out still go through conversion, so their derived defaults
    # (timeouts, stale_after) are filled in exactly as for sections written out.
    for f in dataclasses.fields(cls):
        inner, optional = _unwrap_optional(hints[f.name])
        given = f.name in value or any(aliases.get(str(k)) == f.name for k in value)
        if not given and not optional and _is_dataclass_type(inner):
            kwargs[f.name] = _convert({}, inner, (*path, f.name), problems)
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


def _marks(
    node: yaml.Node, path: Path, origins: dict[Path, str], filename: str, dupes: list[str]
) -> None:
    origins[path] = f"{filename}:{node.start_mark.line + 1}"
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            line = f"{filename}:{key_node.start_mark.line + 1}"
            if key in seen:
                # YAML would silently keep the last one; a typo protection must not.
                dupes.append(f"{line}: {'.'.join(child)}: key given twice")
            seen.add(key)
            _marks(value_node, child, origins, filename, dupes)
            origins[child] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _marks(item, (*path, str(i)), origins, filename, dupes)


def read_yaml(path: str) -> tuple[dict[str, Any], dict[Path, str]]:
    """Parse a config file (``-``: standard input) into plain data plus ``file:line`` per key."""
    try:
        if path == "-":
            text = sys.stdin.read()
            path = "<stdin>"
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read config file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: config file is not UTF-8 text: {exc.reason}"]) from None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError([f"{where}: invalid YAML: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML: {exc}"]) from None
    origins: dict[Path, str] = {}
    dupes: list[str] = []
    if node is not None:
        _marks(node, (), origins, path, dupes)
    if dupes:
        raise ConfigError(dupes)
    if data is None:
        return {}, origins
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the config file must be a mapping of sections"])
    return data, origins


def _schema_path(parts: list[str], correct: bool = False) -> tuple[Path | None, str]:
    """Resolve lower-case key parts against the schema; (path, "") or (None, reason).

    ``correct``: an unknown part is replaced by its closest name instead (the
    suggestion a YAML key gets), and only a key (not a section) is a result.
    """
    tp: Any = Config
    path: list[str] = []
    for i, part in enumerate(parts):
        tp, _ = _unwrap_optional(tp)
        if _is_dataclass_type(tp):
            hints = _hints(tp)
            part = getattr(tp, "ALIASES", {}).get(part, part)
            if part not in hints and correct:
                part = close_key(tp, part, list(hints)) or part
            if part not in hints:
                suggestion = _unknown_hint(tp, part, list(hints))
                return None, f"unknown key {'.'.join([*path, part])}{suggestion}"
            tp = hints[part]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return None, f"{'.'.join(path)} has no key {'.'.join(parts[i:])}"
        path.append(part)
    if correct and _is_dataclass_type(_unwrap_optional(tp)[0]):
        return None, f"{'.'.join(path)} is a section"
    return tuple(path), ""


def closest_key(parts: list[str]) -> Path | None:
    """The key that mistyped ``parts`` most likely meant (each part corrected); None if none."""
    return _schema_path(parts, correct=True)[0]


def env_name(path: Path) -> str:
    """``ACCEL_EXPORTER_WEB__LISTEN_ADDRESS`` for ``("web", "listen_address")``."""
    return ENV_PREFIX + "__".join(part.upper() for part in path)


def _set(data: dict[str, Any], path: Path, value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def load_config(
    path: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> Config:
    """Build the validated config; raise :class:`ConfigError` listing every problem.

    ``overrides`` maps dotted keys (``web.listen_address``) to text, as flags give them.
    ``notes`` receives warnings that are no error (an old key name, still read).
    """
    notes = [] if notes is None else notes
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    origins: dict[Path, str] = {}
    if path:
        data, origins = read_yaml(path)
    early: list[str] = []
    # Old section names in the file move to the new ones first, so that environment
    # variables and flags (already spelled the new way) merge into them.
    for old, new in Config.ALIASES.items():
        if old in data and new not in data:
            notes.append(f"{origins.get((old,), path)}: {old}: renamed to {new}; read as such")
            data[new] = data.pop(old)
            for moved in [k for k in origins if k[:1] == (old,)]:
                renamed_key = (new, *moved[1:])
                origins[renamed_key] = origins[moved]
    sections = [f.name.upper() + "_" for f in dataclasses.fields(Config)]
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :]
        if "__" not in rest:
            if rest.startswith(tuple(sections)):
                head, _, tail = rest.partition("_")
                early.append(
                    f"env {name}: levels are separated by two underscores "
                    f"(did you mean {ENV_PREFIX}{head}__{tail}?)"
                )
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        key, why = _schema_path(parts)
        if key is None:
            close = closest_key(parts)
            if close is not None:
                why = f"unknown key {'.'.join(parts)}{hint(env_name(close))}"
            early.append(f"env {name}: {why}")
            continue
        if list(key) != parts:
            new_name = env_name(key)
            notes.append(f"env {name}: renamed to {new_name}; read as such")
        _set(data, key, env[name])
        origins[key] = f"env {name}"
    for dotted, text in (overrides or {}).items():
        key, why = _schema_path(dotted.split("."))
        flag = flag_name(tuple(dotted.split(".")))
        if key is None:
            early.append(f"flag {flag}: {why}")
            continue
        _set(data, key, text)
        origins[key] = f"flag {flag}"
    early += _merge_web_config(data, origins)
    problems = _Problems(origins)
    problems.items.extend(early)
    config = _convert(data, Config, (), problems)
    notes.extend(problems.notes)
    if isinstance(config, Config) and config.outputs.otlp.enabled:
        _check_otlp(config, env, problems)
    if problems.items or config is INVALID:
        raise ConfigError(problems.items or ["invalid configuration"])
    assert isinstance(config, Config)
    return config


def _merge_web_config(data: dict[str, Any], origins: dict[Path, str]) -> list[str]:
    """Fold ``web.config_file`` (exporter-toolkit format) into ``web``; the problems found."""
    web = data.get("web")
    path = web.get("config_file") if isinstance(web, dict) else None
    if not isinstance(path, str) or not path:
        return []
    assert isinstance(web, dict)
    mapped, problems = read_web_config(path)
    origin = origins.get(("web", "config_file"), "")
    for section, values in mapped.items():
        if web.get(section):
            problems.append(f"web.{section}: set both here and in web.config_file {path}; keep one")
            continue
        web[section] = values
        for key in values:
            origins[("web", section, key)] = f"web.config_file {path} (from {origin})"
    return problems


def _check_otlp(config: Config, env: Mapping[str, str], problems: _Problems) -> None:
    """An enabled OTLP output must be usable: its keys, and the protocol variable in ``env``.

    ``env`` is the environment load_config was given, never the process's own.
    The other OTEL_* variables are the SDK's to read when the output starts.
    """
    from exporter.config.otlp import resolve, sdk_missing

    otlp = ("outputs", "otlp")
    if sdk_missing():
        problems.add((*otlp, "enabled"), "needs the accel-exporter 'otlp' extra (docs/deploy.md)")
    for key, message in resolve(config.outputs.otlp, env).problems:
        problems.add((*otlp, *key.split(".")), message)
