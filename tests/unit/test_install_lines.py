"""Install lines: one list of extras everywhere, and none naming an index (newcomer-4 F3, F16).

The package is published on no index: a line telling a user to ``pip install
accel-exporter`` fails, and would install whatever someone registers under that name.
Every line installing a node's set of extras (README, docs, the systemd unit, the
scripts, the Containerfile) names the same runtime extras as pyproject.toml.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "helm" / "accel-exporter").glob("*.md"),
        ROOT / "systemd" / "accel-exporter.service",
        ROOT / "scripts" / "build",
        ROOT / "scripts" / "run",
        ROOT / "Containerfile",
        ROOT / "bench" / "idle.py",
    ]
)
# An extras list of three or more: a node's install (gpu-validation's .[nvidia,cuda] is
# a deliberate subset).
EXTRAS = re.compile(r"\[([a-z0-9]+(?:,[a-z0-9]+){2,})\]")
EXTRAS_DEFAULT = re.compile(r"EXTRAS(?:=\$\{ACCEL_EXPORTER_EXTRAS:-| = \")([a-z0-9,]+)")
FROM_INDEX = re.compile(r"pip install ['\"]?accel-exporter\b")


def runtime_extras() -> list[str]:
    """The package's extras (pyproject.toml's optional-dependencies) but ``dev``."""
    extras = metadata.metadata("accel-exporter").get_all("Provides-Extra") or []
    return [name for name in extras if name != "dev"]


def test_the_runtime_extras_are_those_of_the_docs() -> None:
    assert runtime_extras() == [
        "nvidia",
        "amd",
        "intel",
        "cuda",
        "otlp",
        "k8s",
        "tpu",
        "nvsentinel",
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_install_line_names_every_runtime_extra(path: Path) -> None:
    text = path.read_text()
    lists = [m.group(1) for m in EXTRAS.finditer(text) if "nvidia" in m.group(1)]
    lists += EXTRAS_DEFAULT.findall(text)
    for found in lists:
        assert sorted(found.split(",")) == sorted(runtime_extras()), (path.name, found)


def test_the_files_install_lines_are_found() -> None:
    # The scan above would pass on files it no longer recognises.
    total = sum(
        len([m for m in EXTRAS.finditer(p.read_text()) if "nvidia" in m.group(1)])
        + len(EXTRAS_DEFAULT.findall(p.read_text()))
        for p in FILES
    )
    assert total >= 10, total


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_line_installs_from_an_index(path: Path) -> None:
    for line in path.read_text().splitlines():
        if FROM_INDEX.search(line):
            # Only to say that it does not work.
            assert re.search(r"finds nothing|does not work|on no index", line), (path.name, line)
