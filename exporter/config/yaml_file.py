"""The config file: YAML read into plain data, with the ``file:line`` of every key."""

from __future__ import annotations

import sys
from typing import Any

import yaml

from exporter.config.keys import Path
from exporter.errors import ConfigError


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
