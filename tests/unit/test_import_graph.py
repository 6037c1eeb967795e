"""Dependencies between exporter's layers point one way (docs/architecture.md).

``workers/`` (the worker process and the daemon's side of it) and ``backends/``
(vendor code run inside a worker) meet only in ``backend_api/``: neither imports
the other, and ``backend_api/`` imports neither. Read from the source (every
import statement, those under ``if TYPE_CHECKING`` and inside functions too), so
an import added anywhere in a module counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXPORTER = Path(__file__).resolve().parents[2] / "exporter"

# package -> the packages its modules must not import
FORBIDDEN = {
    "workers": ("exporter.backends",),
    "backends": ("exporter.workers",),
    "backend_api": ("exporter.backends", "exporter.workers"),
}


def imported(source: str, module: str) -> set[str]:
    """Every module ``source`` (the text of ``module``, dotted) imports, by absolute name."""
    out: set[str] = set()
    package = module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            out.add(base)
            # "from exporter import backends" imports the package exporter.backends.
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def offences(package: str) -> list[str]:
    """``module imports name`` for each forbidden import in ``exporter/<package>/``."""
    found = []
    for path in sorted((EXPORTER / package).rglob("*.py")):
        module = ".".join(("exporter", *path.relative_to(EXPORTER).with_suffix("").parts))
        for name in sorted(imported(path.read_text(), module)):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package]):
                found.append(f"{module} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_none_of_the_layers_it_must_not(package: str) -> None:
    assert (EXPORTER / package).is_dir()
    assert offences(package) == []


@pytest.mark.parametrize(
    "line",
    [
        "from exporter.backends.base import BackendError",
        "from exporter.backends import base",
        "from exporter import backends",
        "import exporter.backends.nvml",
        "from ..backends import base",
        "if TYPE_CHECKING:\n    from exporter.backends.contract import Emitter",
        "def f():\n    import exporter.backends.amdsmi",
    ],
)
def test_every_way_of_importing_a_backend_is_seen(line: str) -> None:
    names = imported(line, "exporter.workers.runner")
    assert any(n == "exporter.backends" or n.startswith("exporter.backends.") for n in names)


def test_a_lower_layer_import_is_allowed() -> None:
    names = imported(
        "from exporter.backend_api import crumb\nfrom . import stackdump", "exporter.workers.child"
    )
    assert names == {
        "exporter.backend_api",
        "exporter.backend_api.crumb",
        "exporter.workers",
        "exporter.workers.stackdump",
    }


# The lowest layers and the only exporter modules each may import: the catalog reads the
# vendor table (exporter/vendors.py), which reads nothing of the daemon's.
LEAVES = {
    "exporter.catalog": ("exporter.catalog", "exporter.vendors", "exporter.suggest"),
    "exporter.vendors": (),
    "exporter.suggest": (),
}


@pytest.mark.parametrize("layer", sorted(LEAVES))
def test_the_lowest_layers_import_nothing_above_them(layer: str) -> None:
    path = EXPORTER.joinpath(*layer.split(".")[1:])
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    assert files and all(f.is_file() for f in files)
    found = []
    for f in files:
        module = ".".join(("exporter", *f.relative_to(EXPORTER).with_suffix("").parts))
        for name in sorted(imported(f.read_text(), module)):
            allowed = any(name == a or name.startswith(a + ".") for a in LEAVES[layer])
            if name.startswith("exporter.") and not allowed:
                found.append(f"{module} imports {name}")
    assert found == []
