"""YAML file + environment + flags -> one validated :class:`Config`.

Precedence: flags over environment over file over defaults. Every problem is
collected and reported at once, each naming its key and where it came from
(``file:line``, the environment variable, or the flag).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, get_args, get_origin

from exporter.config.convert import INVALID, Problems, close_key, convert, unknown_hint
from exporter.config.keys import (
    ENV_PREFIX,
    Path,
    env_name,
    flag_name,
    is_section,
    type_hints,
    unwrap_optional,
)
from exporter.config.root import Config
from exporter.config.web_config import merge_web_config
from exporter.config.yaml_file import read_yaml
from exporter.errors import ConfigError
from exporter.suggest import hint


def _schema_path(parts: list[str], correct: bool = False) -> tuple[Path | None, str]:
    """Resolve lower-case key parts against the schema; (path, "") or (None, reason).

    ``correct``: an unknown part is replaced by its closest name instead (the
    suggestion a YAML key gets), and only a key (not a section) is a result.
    """
    tp: Any = Config
    path: list[str] = []
    for i, part in enumerate(parts):
        tp, _ = unwrap_optional(tp)
        if is_section(tp):
            hints = type_hints(tp)
            part = getattr(tp, "ALIASES", {}).get(part, part)
            if part not in hints and correct:
                part = close_key(tp, part, list(hints)) or part
            if part not in hints:
                suggestion = unknown_hint(tp, part, list(hints))
                return None, f"unknown key {'.'.join([*path, part])}{suggestion}"
            tp = hints[part]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return None, f"{'.'.join(path)} has no key {'.'.join(parts[i:])}"
        path.append(part)
    if correct and is_section(unwrap_optional(tp)[0]):
        return None, f"{'.'.join(path)} is a section"
    return tuple(path), ""


def closest_key(parts: list[str]) -> Path | None:
    """The key that mistyped ``parts`` most likely meant (each part corrected); None if none."""
    return _schema_path(parts, correct=True)[0]


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
    early += merge_web_config(data, origins)
    problems = Problems(origins)
    problems.items.extend(early)
    config = convert(data, Config, (), problems)
    notes.extend(problems.notes)
    if isinstance(config, Config) and config.outputs.otlp.enabled:
        from exporter.config.otlp import enabled_problems  # the OTLP output's module: only if on

        for otlp_key, message in enabled_problems(config.outputs.otlp, env):
            problems.add(("outputs", "otlp", *otlp_key.split(".")), message)
    if problems.items or config is INVALID:
        raise ConfigError(problems.items or ["invalid configuration"])
    assert isinstance(config, Config)
    return config
