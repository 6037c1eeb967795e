"""Replace every family-name string literal under exporter/ by its exporter.family_names symbol.

``"accel_power_watts"`` becomes ``ACCEL_POWER_WATTS``, imported with ``from
exporter.family_names import ...`` in the file's import block, so a renamed or misspelt
family is an import or mypy error rather than a reading dropped at run time. Only a
literal whose whole value is a catalog family name (``CATALOG``'s keys) is replaced;
the catalog rows (exporter/catalog/, the source family_names.py is generated from) keep theirs,
and other exporters' names (``DCGM_FI_*``, ``gpu_*``) are not ours. Docstrings are prose.

Idempotent and minimal: a second run changes nothing; a run after a merge touches only
the literals the merge brought and the import lines they need, then lets ruff sort and
merge those imports (``ruff check --select I --fix``) and format the touched files.

A literal the script cannot replace by a bare name (in a ``match`` pattern, inside an
f-string, in a ``Literal[...]`` type) is listed and the run fails; so is a file that
binds a symbol's name to something else.

Usage: ``python scripts/use_family_names.py [--check] [PATH ...]`` (default: exporter/).
``--check`` writes nothing and exits 1 when a literal is left.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter.catalog import CATALOG  # noqa: E402
from scripts.gen_names import symbol  # noqa: E402

MODULE = "exporter.family_names"
# The catalog (the source of the names), the generated constants and protobuf code.
SKIP_UNDER = ("exporter/catalog/", "exporter/family_names.py")
SKIP_PARTS = frozenset({"third_party"})
RUFF = Path(sys.executable).with_name("ruff")


@dataclass(frozen=True)
class Found:
    """One family-name literal found: where it is (ast positions, UTF-8 columns) and its name."""

    line: int
    col: int
    end_line: int
    end_col: int
    name: str


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes of the module, its classes and functions."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _unreplaceable(tree: ast.Module) -> set[int]:
    """Ids of constants a bare name cannot stand for: patterns, f-string parts, Literal[]."""
    out: set[int] = set()
    for node in ast.walk(tree):
        inner: ast.AST | None = None
        if isinstance(node, (ast.MatchValue, ast.JoinedStr)):
            inner = node
        elif isinstance(node, ast.Subscript) and (
            (isinstance(node.value, ast.Name) and node.value.id == "Literal")
            or (isinstance(node.value, ast.Attribute) and node.value.attr == "Literal")
        ):
            inner = node.slice
        if inner is not None:
            out.update(id(child) for child in ast.walk(inner))
    return out


def literals(tree: ast.Module) -> tuple[list[Found], list[Found]]:
    """(the family-name literals to replace, those that cannot be) of one module."""
    skip = _docstrings(tree)
    stuck = _unreplaceable(tree)
    replace: list[Found] = []
    refused: list[Found] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if node.value not in CATALOG or id(node) in skip:
            continue
        assert node.end_lineno is not None and node.end_col_offset is not None
        found = Found(
            node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, node.value
        )
        (refused if id(node) in stuck else replace).append(found)
    return replace, refused


def _bound_names(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(name, line) of every binding in the module other than an import from MODULE."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id, node.lineno
        elif isinstance(node, ast.arg):
            yield node.arg, node.lineno
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield (alias.asname or alias.name).split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module != MODULE:
            for alias in node.names:
                yield alias.asname or alias.name, node.lineno


def _import_at(tree: ast.Module) -> int:
    """The line (1-based) after which the new import goes: the end of the first import block."""
    at = 0
    body = tree.body
    start = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        at = body[0].end_lineno or 0
        start = 1
    for node in body[start:]:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            break
        at = node.end_lineno or at
    return at


def rewrite(path: Path, text: str) -> tuple[str, list[str]]:
    """``text`` with its literals replaced and the import added; the problems found."""
    tree = ast.parse(text, str(path))
    replace, refused = literals(tree)
    problems = [
        f"{path}:{lit.line}: {lit.name!r} cannot become {symbol(lit.name)} here "
        "(match pattern, f-string or Literal[]): name it by hand"
        for lit in refused
    ]
    if not replace:
        return text, problems
    wanted = {symbol(lit.name) for lit in replace}
    for name, line in _bound_names(tree):
        if name in wanted:
            problems.append(f"{path}:{line}: {name} is bound to something else in this file")
    if problems:
        return text, problems
    lines = [line.encode() for line in text.splitlines(keepends=True)]
    # From the end, so earlier positions stay valid; columns are UTF-8 byte offsets.
    for lit in sorted(replace, key=lambda x: (x.line, x.col), reverse=True):
        first, last = lines[lit.line - 1], lines[lit.end_line - 1]
        new = first[: lit.col] + symbol(lit.name).encode() + last[lit.end_col :]
        lines[lit.line - 1 : lit.end_line] = [new]
    at = _import_at(tree)
    statement = f"from {MODULE} import {', '.join(sorted(wanted))}\n".encode()
    lines.insert(at, statement)
    return b"".join(lines).decode(), problems


def files(paths: Sequence[str]) -> list[Path]:
    """The Python files under ``paths`` but the catalog, family_names.py and protobuf code."""
    out = []
    for given in paths or ["exporter"]:
        root = Path(given)
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            rel = path.resolve().relative_to(REPO)
            if not rel.as_posix().startswith(SKIP_UNDER) and not SKIP_PARTS & set(rel.parts):
                out.append(path)
    return out


def main() -> int:
    """Rewrite (or with --check count) the family-name literals of the given files."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args()
    touched: list[Path] = []
    problems: list[str] = []
    count = 0
    for path in files(args.paths):
        text = path.read_text()
        replace, _ = literals(ast.parse(text, str(path)))
        count += len(replace)
        new, found = rewrite(path, text)
        problems += found
        if new != text:
            touched.append(path)
            if not args.check:
                path.write_text(new)
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check:
        print(f"{count} family-name literals in {len(touched)} files", file=sys.stderr)
        return 1 if count or problems else 0
    if touched:
        names = [str(p) for p in touched]
        subprocess.run(
            [str(RUFF), "check", "--quiet", "--select", "I", "--fix", *names], check=True
        )
        subprocess.run([str(RUFF), "format", "--quiet", *names], check=True)
    print(f"{count} literals replaced in {len(touched)} files", file=sys.stderr)
    for path in touched:
        print(path)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
