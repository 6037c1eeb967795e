"""Every config key as a flag, grouped by section, described from the config schema.

The same descriptions feed docs/configuration.md (scripts/gen_docs.py), so the
flags, the file, the environment and the docs cannot disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

from exporter.commands.config_file import add_config_file_flag
from exporter.config import leaves
from exporter.config.keys import Leaf, flag_name, format_default, key_help, type_hints
from exporter.config.loader import closest_key
from exporter.config.root import Config
from exporter.suggest import closest, hint

OVERRIDE_PREFIX = "override:"
# exporter-toolkit's flag name for its web config file, accepted as is.
TOOLKIT_ALIASES = {("web", "config_file"): "--web.config.file"}
DERIVED = (
    'A default "derived" is computed from other keys: a source\'s timeout is its interval '
    "(at most 30s), stale_after three intervals."
)


def sections(
    cls: type = Config, prefix: tuple[str, ...] = (), summary: str = ""
) -> Iterator[tuple[str, str]]:
    """(dotted section, one-line summary) for every section holding keys, depth first."""
    hints = type_hints(cls)
    own = False
    nested = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        inner = next((a for a in get_args(tp) if dataclasses.is_dataclass(a)), tp)
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            nested.append((f.name, inner))
        else:
            own = True
    if own and prefix:
        yield ".".join(prefix), _summary(cls, summary)
    for name, inner in nested:
        yield from sections(inner, (*prefix, name), key_help(cls, name))


def _summary(cls: type, given: str) -> str:
    """The parent's HELP for the section, else the first line of its docstring."""
    return given or (cls.__doc__ or "").strip().splitlines()[0].rstrip(".").replace("``", "")


def leaf_class(leaf: Leaf) -> type:
    """The dataclass that declares ``leaf``."""
    cls: Any = Config
    for part in leaf.path[:-1]:
        tp = type_hints(cls)[part]
        cls = next((a for a in get_args(tp) if dataclasses.is_dataclass(a)), tp)
    return typing.cast(type, cls)


def metavar(tp: Any) -> str:
    """Choices as choices (``{debug,info}``), other types by kind (DURATION, FILE, N)."""
    union = get_origin(tp) in (typing.Union, types.UnionType)
    args = [a for a in get_args(tp) if a is not type(None)] if union else [tp]
    choices: list[str] = []
    for arg in args:
        if get_origin(arg) is Literal:
            choices += [str(a) for a in get_args(arg)]
        elif arg is bool:
            choices += ["true", "false"]
    if choices:
        return "{" + ",".join(choices) + "}"
    inner = args[0]
    if get_origin(inner) is typing.Annotated:
        return {"duration": "DURATION", "file": "FILE", "secret": "TEXT"}[get_args(inner)[1]]
    if get_origin(inner) is list:
        return "LIST"
    if get_origin(inner) is dict:
        return "MAP"
    return {int: "N", float: "NUMBER", str: "TEXT"}.get(inner, "VALUE")


def flag_help(leaf: Leaf) -> str:
    """Description plus the default, when there is one worth showing."""
    text = key_help(leaf_class(leaf), leaf.path[-1])
    default = format_default(leaf.default, leaf.type)
    if default in ("", "{}", "[]", "unset", "derived"):
        return text
    return f"{text} (default: {default})"


def add_config_flags(parser: argparse.ArgumentParser, visible: bool) -> None:
    """``--config.file`` and one flag per config key; hidden from help unless ``visible``."""
    add_config_file_flag(parser, "YAML config file (optional; defaults are built in)")
    groups = {}
    if visible:
        for name, text in sections():
            groups[name] = parser.add_argument_group(name, text)
    for leaf in leaves():
        names = [leaf.flag]
        if leaf.path in TOOLKIT_ALIASES:
            names.append(TOOLKIT_ALIASES[leaf.path])
        target = groups.get(".".join(leaf.path[:-1]), parser)
        target.add_argument(
            *names,
            dest=OVERRIDE_PREFIX + leaf.dotted,
            metavar=metavar(leaf.type),
            default=argparse.SUPPRESS,
            help=flag_help(leaf) if visible else argparse.SUPPRESS,
        )


def old_spellings() -> dict[str, str]:
    """Flag spellings of earlier versions -> today's (sources were kebab-cased, enrich renamed)."""
    out = {}
    for leaf in leaves():
        path = list(leaf.path)
        olds = {"--" + ".".join(p.replace("_", "-") for p in path)}
        for old, new in Config.ALIASES.items():
            if path[0] == new:
                olds.add("--" + ".".join(p.replace("_", "-") for p in [old, *path[1:]]))
                olds.add("--" + ".".join([old, *path[1:-1], path[-1].replace("_", "-")]))
        # A key its section renamed (WebConfig.ALIASES: read_timeout -> send_timeout).
        for old_key, new_key in getattr(leaf_class(leaf), "ALIASES", {}).items():
            if new_key == path[-1]:
                olds.add("--" + ".".join([*path[:-1], old_key.replace("_", "-")]))
        for old in olds - {leaf.flag}:
            out[old] = leaf.flag
    return out


def spellings() -> dict[str, str]:
    """Each config flag with every ``-`` read as ``_`` (``outputs.prometheus.cluster_name``) -> it.

    A key may be written as in the YAML file (snake case) or as the flag spells it
    (kebab case): ``--outputs.prometheus.cluster_name`` is ``--outputs.prometheus.cluster-name``.
    """
    out = {}
    for leaf in leaves():
        out[leaf.flag[2:].replace("-", "_")] = leaf.flag
        if leaf.path in TOOLKIT_ALIASES:
            alias = TOOLKIT_ALIASES[leaf.path]
            out[alias[2:].replace("-", "_")] = alias
    return out


def canonical_argv(argv: list[str], notes: list[str]) -> list[str]:
    """``argv`` with old flag spellings replaced (each noted as renamed) until ``--``.

    A config flag written with ``_`` where the flag has ``-`` (or the other way round)
    is read as the flag, without a note: both spellings are accepted.
    """
    renamed = old_spellings()
    either = spellings()
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        name, sep, value = arg.partition("=")
        if name in renamed:
            notes.append(f"flag {name}: renamed to {renamed[name]}; read as such")
            arg = renamed[name] + sep + value
        elif name.startswith("--") and "." in name:
            flag = either.get(name[2:].replace("-", "_"))
            if flag is not None:
                arg = flag + sep + value
        out.append(arg)
    return out


def mistyped_config_flags(argv: list[str], known: set[str]) -> tuple[list[str], list[str]]:
    """(``argv`` without the unknown dotted flags, one problem naming each), until ``--``.

    A dotted flag can only be a config key: one that is not is reported with the
    key a YAML file or variable with the same typo would be pointed to, and taken
    out with its value, so that argparse does not read the value as a command.
    """
    out: list[str] = []
    problems: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--":
            return out + argv[i:], problems
        name, sep, _ = arg.partition("=")
        if not name.startswith("--") or "." not in name or name in known:
            out.append(arg)
            continue
        parts = [part.replace("-", "_") for part in name[2:].split(".")]
        close = closest_key(parts)
        problems.append(f"unknown flag {name}{hint(flag_name(close) if close else '')}")
        # Every config flag takes a value: the next word is this one's.
        skip = not sep and i + 1 < len(argv) and not argv[i + 1].startswith("--")
    return out, problems


def unknown_flag_problems(extra: list[str], known: set[str]) -> str:
    """The arguments argparse left over: each unknown flag with the closest flag of its command."""
    flags = sorted(k for k in known if k.startswith("--"))
    problems = []
    stray = []
    for i, arg in enumerate(extra):
        name = arg.partition("=")[0]
        if name.startswith("--"):
            problems.append(f"unknown flag {name}{hint(closest(name, flags))}")
        elif not (i and extra[i - 1].startswith("--") and "=" not in extra[i - 1]):
            stray.append(arg)  # not the value of an unknown flag before it
    if stray:
        problems.append(f"unrecognized arguments: {' '.join(stray)}")
    return "; ".join(problems)
