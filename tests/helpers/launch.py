"""Run the daemon CLI with extra sources from a test module.

Usage: ``python tests/helpers/launch.py [--extra-sources module:function] -- <cli args>``.
``function(config) -> list[Source]`` is appended to the registry's sources.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exporter.cli import main
from exporter.sources.registry import build_sources


def run(argv: list[str]) -> int:
    extra = None
    if argv[:1] == ["--extra-sources"]:
        extra, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if extra is None:
        return main(argv)
    module_name, _, func_name = extra.partition(":")
    factory = getattr(importlib.import_module(module_name), func_name)
    return main(argv, source_builder=lambda config: [*build_sources(config), *factory(config)])


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
