"""A family is named once: outside the catalog, code says ``ACCEL_POWER_WATTS``, never a string.

exporter/family_names.py (generated from the catalog by scripts/gen_docs.py) holds one
``Final`` constant per family; every other module under exporter/ imports those, so a
renamed or misspelt family is an import or mypy error instead of a reading the store
drops at run time. Counted from the source: every string constant under exporter/
outside catalog/ whose value is a family name, or one of the names a family's samples
take (``_total``, ``_bucket``, ``_count``, ``_sum``, ``_created``; a counter without
``_total``). Issue 38 found 624 (AST constants; 438 by its count); none are allowed.
``python scripts/use_family_names.py`` replaces the ones a merge brings back.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.catalog import CATALOG
from scripts import use_family_names

REPO = Path(__file__).resolve().parents[2]
EXPORTER = REPO / "exporter"
GENERATED = frozenset({"third_party"})
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def spelled() -> dict[str, str]:
    """Every string that names a family's samples -> the family it names."""
    out: dict[str, str] = {}
    for name, row in CATALOG.items():
        base = row.family_name
        for form in (base, *(base + suffix for suffix in SUFFIXES)):
            out.setdefault(form, name)
        out[name] = name
    return out


def family_literals(source: str, where: str) -> list[str]:
    """``where:line 'literal'`` of each family-name string constant in ``source``."""
    forms = spelled()
    return [
        f"{where}:{node.lineno} {node.value!r}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in forms
    ]


def outside_catalog() -> list[Path]:
    """The Python files of exporter/ but catalog/, family_names.py and protobuf code."""
    return [
        p
        for p in sorted(EXPORTER.rglob("*.py"))
        if p.relative_to(EXPORTER).parts[0] not in ("catalog", "family_names.py")
        and not GENERATED & set(p.parts)
    ]


def test_no_family_name_is_a_string_literal_outside_the_catalog() -> None:
    files = outside_catalog()
    assert len(files) > 100  # the walk found the package
    found = [
        hit
        for path in files
        for hit in family_literals(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert found == [], f"{len(found)} literals: run python scripts/use_family_names.py"


@pytest.mark.parametrize(
    "source",
    [
        'x = "accel_power_watts"',
        'f(metric="accel_xid_errors_total")',
        'x = "accel_xid_errors"',  # a counter's family as prometheus_client names it
        'x = "accel_exporter_source_poll_duration_seconds_bucket"',
        'x = f"accel_power_watts{y}"',
        'match m:\n    case "accel_device_up":\n        pass',
    ],
)
def test_every_spelling_of_a_family_is_counted(source: str) -> None:
    assert len(family_literals(source, "x.py")) == 1


def test_other_strings_are_not_counted() -> None:
    source = (
        '"""About accel_power_watts."""\nx = ("DCGM_FI_DEV_POWER_USAGE", "accel_", "gpu_power")'
    )
    assert family_literals(source, "x.py") == []


def test_family_names_has_one_constant_per_family() -> None:
    names = importlib.import_module("exporter.family_names")
    constants = {k: v for k, v in vars(names).items() if k.isupper()}
    assert constants == {name.upper(): name for name in CATALOG}


def test_family_names_imports_nothing_and_loads_no_catalog() -> None:
    # accel-exporter check imports family names but must not pay for building the catalog.
    tree = ast.parse((EXPORTER / "family_names.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert {getattr(n, "module", None) for n in imports} == {"__future__", "typing"}
    probe = "import sys, exporter.family_names; print(sorted(m for m in sys.modules if m.startswith('exporter')))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
    )
    assert out.stdout.strip() == "['exporter', 'exporter.family_names']"


def test_the_rewrite_replaces_a_literal_and_imports_its_symbol() -> None:
    source = (
        '"""Doc: accel_device_up."""\n\nfrom exporter.model import Reading\n\n'
        'UP = Reading("accel_device_up", (), 1.0)\nOTHER = "accel_device_upx"\n'
    )
    new, problems = use_family_names.rewrite(Path("x.py"), source)
    assert problems == []
    assert new == (
        '"""Doc: accel_device_up."""\n\nfrom exporter.model import Reading\n'
        "from exporter.family_names import ACCEL_DEVICE_UP\n\n"
        'UP = Reading(ACCEL_DEVICE_UP, (), 1.0)\nOTHER = "accel_device_upx"\n'
    )
    # A second run finds nothing to do (ruff, run by main(), sorts the import).
    assert use_family_names.rewrite(Path("x.py"), new) == (new, [])


@pytest.mark.parametrize(
    "source",
    [
        'match m:\n    case "accel_device_up":\n        pass\n',
        'x: Literal["accel_device_up"]\n',
        'x = f"accel_device_up{y}"\n',
        'ACCEL_DEVICE_UP = 1\nx = "accel_device_up"\n',
    ],
)
def test_the_rewrite_refuses_what_a_bare_name_would_change(source: str) -> None:
    new, problems = use_family_names.rewrite(Path("x.py"), source)
    assert new == source
    assert len(problems) == 1
