"""Run the daemon CLI with extra sources from a test module.

Usage: ``python tests/helpers/launch.py [--extra-sources module:function] -- <cli args>``.
``function(config) -> list[Source]`` is appended to the registry's sources.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# The daemon under test runs without rich, as in the container image (Containerfile:
# the runtime extras only). The dev extras bring rich in (tpu-info, twine), and
# structlog imports it whenever it is installed: 0.13 s of CPU per daemon start (about
# a minute of the suite's CPU over its hundreds of daemons) for the console renderer's
# tracebacks, which the tests' json logs never use; without it structlog prints plain ones.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

from exporter.cli import main  # noqa: E402
from exporter.sources.registry import build_sources  # noqa: E402


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
