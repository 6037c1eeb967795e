"""Every command example in README.md and docs/*.md that shows output runs, and shows that.

An example is a fenced block whose lines starting with ``$ `` are commands and
whose other lines are what the command printed. Each page's examples run in the
scene that page describes (which fake library is installed, none at all), set up
from the fakes the other tests use; a page with an example and no scene fails, so
a new example cannot go unchecked. Each line shown must be printed, in order (the
output may hold more lines: an example shows the ones it is about); runs of spaces
are one, and a count of series is a count (the host's depends on the machine), as
is the amdsmi package's directory.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fakes.hlml.control import FakeHlml
from tests.helpers.cli import REPO, WITHOUT_RICH, cli_command
from tests.helpers.native import built_once

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass
class Example:
    """One ``$ command`` and the lines shown after it."""

    command: str
    shown: list[str] = field(default_factory=list)


def examples(page: Path) -> list[Example]:
    """The commands with output in ``page``'s fenced blocks."""
    out: list[Example] = []
    inside = False
    current: Example | None = None
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside, current = not inside, None
        elif inside and line.startswith("$ "):
            current = Example(line[2:].strip())
            out.append(current)
        elif current is not None and line.strip():
            current.shown.append(line)
    return [e for e in out if e.shown]


def _blocks_with_output() -> Iterator[tuple[str, Example]]:
    for page in PAGES:
        for example in examples(page):
            yield str(page.relative_to(REPO)), example


def normalize(line: str) -> str:
    """Runs of spaces as one, series counts as N, the amdsmi package's directory by name."""
    spec = importlib.util.find_spec("amdsmi")
    if spec is not None and spec.origin:
        line = line.replace(os.path.dirname(spec.origin), "<site-packages>/amdsmi")
    line = re.sub(r"\b\d+ series\b", "N series", line)
    return " ".join(line.split())


Scene = Callable[[pytest.TempPathFactory], dict[str, str]]


def _nothing(_: pytest.TempPathFactory) -> dict[str, str]:
    return {}


def _gaudi(tmp: pytest.TempPathFactory) -> dict[str, str]:
    from tests.fakes.hlml.control import build

    lib = built_once("hlml", build, tmp.mktemp("hlml"))
    fake = FakeHlml.create(tmp.mktemp("hlml-state") / "state.bin", devices=8)
    # Configured (by its variable), so that the Level Zero search of the example is
    # the one of a node without it.
    return {**fake.env, "ACCEL_EXPORTER_SOURCES__HLML__LIBRARY_PATH": str(lib)}


def _seven_nvidia_gpus(tmp: pytest.TempPathFactory) -> dict[str, str]:
    from tests.fakes.nvml.control import FakeNvml, build

    lib = built_once("nvml", build, tmp.mktemp("nvml"))
    return FakeNvml.create(lib, tmp.mktemp("nvml-state") / "state", devices=7).env()


# What each page's examples assume about the node.
SCENES: dict[str, Scene] = {
    "docs/amd.md": _nothing,  # no ROCm installed
    "docs/nvidia.md": _nothing,  # no NVIDIA driver
    "docs/intel.md": _gaudi,  # Gaudi's libhlml, no Level Zero loader
    "docs/checks.md": _seven_nvidia_gpus,  # one of eight GPUs missing
}


def run(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``accel-exporter ...`` from this checkout, in exactly ``env`` plus the basics."""
    argv = shlex.split(command)
    assert argv[0] == "accel-exporter", command
    base = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
    full = {**base, "PYTHONPATH": f"{REPO}:{WITHOUT_RICH}", **env}
    return subprocess.run(
        cli_command(*argv[1:]), env=full, capture_output=True, text=True, timeout=120
    )


def test_the_docs_have_examples_to_check():
    pages = {page for page, _ in _blocks_with_output()}
    assert {"docs/amd.md", "docs/intel.md", "docs/nvidia.md", "docs/checks.md"} <= pages
    assert pages <= set(SCENES), f"a page shows output without a scene: {pages - set(SCENES)}"


@pytest.mark.parametrize("page", sorted(SCENES))
def test_every_example_prints_what_its_page_shows(page, tmp_path_factory):
    env = SCENES[page](tmp_path_factory)
    status = None
    for example in examples(REPO / page):
        if example.command == "echo $?":
            assert [str(status)] == example.shown, (page, example)
            continue
        done = run(example.command, env)
        status = done.returncode
        printed = [normalize(line) for line in done.stdout.splitlines()]
        at = 0
        for line in example.shown:
            want = normalize(line)
            assert want in printed[at:], (
                f"{page}: `{example.command}` does not print\n  {want}\nIt printed:\n"
                + "\n".join(printed)
                + f"\n{done.stderr[-2000:]}"
            )
            at = printed.index(want, at) + 1


def test_a_shown_line_must_be_printed(tmp_path):
    # The comparison can fail: a page whose example shows something else.
    page = tmp_path / "page.md"
    page.write_text("```\n$ accel-exporter --version\naccel-exporter 0.0.0-not-this\n```\n")
    (example,) = examples(page)
    printed = run(example.command, {}).stdout
    assert normalize(example.shown[0]) not in [normalize(x) for x in printed.splitlines()]


def yaml_blocks(page: Path, heading: str) -> list[str]:
    """The ```yaml blocks of ``page`` under the ``## heading`` (up to the next heading)."""
    text = page.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```yaml\n(.*?)```", section, flags=re.S)


def test_the_readme_config_example_is_valid_as_written(tmp_path):
    # newcomer-4 F17: copied verbatim, the example must pass `config check`, and load.
    (block,) = yaml_blocks(REPO / "README.md", "Configuration")
    path = tmp_path / "accel.yaml"
    path.write_text(block)
    done = run(f"accel-exporter config check {path}", {})
    assert (done.returncode, done.stdout.strip()) == (0, f"{path}: ok"), done.stderr
    assert "warning" not in done.stderr, done.stderr
    # And the daemon's own loader reads what it says.
    from exporter.config import load_config

    config = load_config(str(path), env={})
    assert config.web.listen_address == ":9842" and config.sources.host.interval == 5.0
