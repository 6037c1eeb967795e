"""Dependencies between exporter's layers point one way (docs/architecture.md).

``workers/`` (the worker process and the daemon's side of it) and ``backends/``
(vendor code run inside a worker) meet only in ``backend_api/``: neither imports
the other, and ``backend_api/`` imports neither. Nothing outside ``backends/`` and
``workers/`` imports ``backends/``: the folder is what runs in a worker (the daemon's
host readers are ``host/``, the contracts both sides share ``backend_api/``). And there
is no import circle anywhere in exporter/. Read from the source (every import statement,
those under ``if TYPE_CHECKING`` and inside functions too), so an import added anywhere
in a module counts.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
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


# -- the process boundary: backends/ is code that runs in a worker -------------------

# The only packages whose modules may import exporter.backends: the backends themselves
# and the worker process that loads one (by name, from its init frame). The daemon names
# a backend as a "module:Class" string (exporter/vendors.py), which is not an import.
MAY_IMPORT_BACKENDS = ("exporter.backends", "exporter.workers")


def modules() -> dict[str, Path]:
    """Every module under exporter/, by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(EXPORTER.rglob("*.py")):
        parts = ("exporter", *path.relative_to(EXPORTER).with_suffix("").parts)
        out[".".join(parts[:-1] if path.name == "__init__.py" else parts)] = path
    return out


def own_name(module: str, path: Path) -> str:
    """The name relative imports resolve against: a package's ``__init__`` is inside it."""
    return f"{module}.__init__" if path.name == "__init__.py" else module


def test_nothing_outside_backends_and_workers_imports_a_backend() -> None:
    found = []
    for module, path in modules().items():
        if any(module == p or module.startswith(p + ".") for p in MAY_IMPORT_BACKENDS):
            continue
        for name in sorted(imported(path.read_text(), own_name(module, path))):
            if name == "exporter.backends" or name.startswith("exporter.backends."):
                found.append(f"{module} imports {name}")
    assert found == []


# -- no import circle ----------------------------------------------------------------


def edges(source: str, module: str, known: Collection[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (the text of ``module``) depends on.

    Every import statement counts: at module level, inside a function and under ``if
    TYPE_CHECKING``. A function-level import is a dependency all the same, only a late one
    (hiding a circle in a function is how it survives unnoticed), and a type-only one is
    a dependency a reader (and mypy) must follow. ``from package import name`` depends
    on the submodule when ``name`` is one, else on the package: importing a submodule
    initializes its package first, which is not a circle of ours.
    """
    out: set[str] = set()
    package = module.rpartition(".")[0]

    def nearest(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        for target in targets:
            found = nearest(target)
            if found is not None and found != module.removesuffix(".__init__"):
                out.add(found)
    return out


def circles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or one importing itself).

    Tarjan's algorithm, iterative (the graph is deep enough to matter for recursion).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def module_graph() -> dict[str, set[str]]:
    """exporter/'s modules and what each imports of them."""
    known = modules()
    return {m: edges(p.read_text(), own_name(m, p), known) for m, p in known.items()}


def test_no_import_circle_in_exporter() -> None:
    graph = module_graph()
    assert len(graph) > 100 and sum(map(len, graph.values())) > 500  # the tree was read
    assert circles(graph) == []


def test_a_circle_is_found_however_long_and_wherever_it_starts() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"a"}}
    assert circles(graph) == [["a", "b", "c"], ["e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_a_function_level_or_type_only_import_makes_an_edge() -> None:
    known = {"exporter.x", "exporter.y", "exporter.z", "exporter.pkg", "exporter.pkg.sub"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from exporter.y import Y\n"
        "def f():\n    from exporter import z\n"
        "from exporter.pkg import sub, name\n"
    )
    assert edges(source, "exporter.x", known) == {
        "exporter.y",
        "exporter.z",
        "exporter.pkg.sub",
        "exporter.pkg",
    }
    # A submodule importing a sibling through its package is no edge to the package.
    assert edges("from exporter.pkg import sub", "exporter.pkg.other", known) == {
        "exporter.pkg.sub"
    }


# -- upstream copies: exporter/third_party/ --------------------------------------------

# Each upstream proto's gencode and the one package that may import it. The TPU service's
# is worker code (it was under backends/ before it moved here): only a backend reads it,
# so the daemon never loads it; the other two belong to one daemon layer each.
THIRD_PARTY_READERS = {
    "exporter.third_party.tpu_metric_service": "exporter.backends",
    "exporter.third_party.pod_resources": "exporter.enrich",
    "exporter.third_party.nvsentinel_health_event": "exporter.outputs",
}


def third_party_offences(graph: Mapping[str, Collection[str]]) -> list[str]:
    """``module imports name`` for each import into or out of exporter/third_party/ not allowed."""
    found = []
    for module, targets in sorted(graph.items()):
        inside = module == "exporter.third_party" or module.startswith("exporter.third_party.")
        for name in sorted(targets):
            if inside:  # upstream code reads nothing of ours (its own package aside)
                if not name.startswith("exporter.third_party"):
                    found.append(f"{module} imports {name}")
                continue
            for package, reader in THIRD_PARTY_READERS.items():
                hit = name == package or name.startswith(package + ".")
                if hit and not (module == reader or module.startswith(reader + ".")):
                    found.append(f"{module} imports {name}")
            if name == "exporter.third_party":
                found.append(f"{module} imports {name}")
    return found


def test_each_upstream_proto_is_imported_by_its_one_layer_only() -> None:
    packages = {
        f"exporter.third_party.{p.name}"
        for p in (EXPORTER / "third_party").iterdir()
        if (p / "__init__.py").is_file()
    }
    assert packages == set(THIRD_PARTY_READERS)  # a new upstream copy names its reader
    graph = module_graph()
    assert (
        "exporter.third_party.tpu_metric_service.tpu_metric_service_pb2"
        in graph["exporter.backends.tpu"]
    )
    assert third_party_offences(graph) == []


def test_a_daemon_module_importing_the_tpu_proto_is_an_offence() -> None:
    graph = {
        "exporter.backends.tpu": {"exporter.third_party.tpu_metric_service.tpu_metric_service_pb2"},
        "exporter.sources.tpu": {"exporter.third_party.tpu_metric_service"},
        "exporter.third_party.pod_resources.pod_resources_pb2": {"exporter.errors"},
    }
    assert third_party_offences(graph) == [
        "exporter.sources.tpu imports exporter.third_party.tpu_metric_service",
        "exporter.third_party.pod_resources.pod_resources_pb2 imports exporter.errors",
    ]
