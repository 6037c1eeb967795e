"""The house stays walkable: long files and long functions in exporter/ never grow in number.

Measured as review 4 measured them (shared/reference/review-4.md, appendix): a file
is long above 500 lines (newlines counted), a function (``def`` or ``async def``,
methods and nested ones included) above 80 lines from its ``def`` to its last line.
The ceilings are the counts after issue 38's split; lower them when a split lands,
never raise them: split the file or the function instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

EXPORTER = Path(__file__).resolve().parents[2] / "exporter"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
# After issue 38 (13 files and 5 functions before it): health.py, sources/device.py, store.py,
# catalog/device.py, checks/devices.py; no function (App.reload was split into
# _prepare_reload and _swap_runtime, HealthJudge.judge into _survey, _sort, _read_reasons
# and _advise, DeviceSource._poll_once's fault handling into _while_starting and
# _carried_over).
LONG_FILES_CEILING = 5
LONG_FUNCTIONS_CEILING = 0


def long_files(root: Path = EXPORTER) -> list[str]:
    """The Python files under ``root`` with more than MAX_FILE_LINES lines."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.read_text(encoding="utf-8").count("\n") > MAX_FILE_LINES
    )


def long_functions(root: Path = EXPORTER) -> list[str]:
    """``file:line name`` of every function under ``root`` longer than MAX_FUNCTION_LINES."""
    out = []
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(root)}:{node.lineno} {node.name}")
    return out


def test_long_files_do_not_grow_in_number() -> None:
    found = long_files()
    assert len(found) <= LONG_FILES_CEILING, f"files over {MAX_FILE_LINES} lines: {found}"


def test_long_functions_do_not_grow_in_number() -> None:
    found = long_functions()
    assert len(found) <= LONG_FUNCTIONS_CEILING, (
        f"functions over {MAX_FUNCTION_LINES} lines: {found}"
    )


def test_the_measure_sees_a_long_file_and_a_long_function(tmp_path: Path) -> None:
    # The counter itself: a 501-line file with an 81-line function is seen as both,
    # a 500-line file with an 80-line function as neither.
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    (tmp_path / "long.py").write_text("def f():\n" + body + "    return 0\n" + "\n" * 420)
    (tmp_path / "short.py").write_text(
        "def g():\n" + body[: -len("    x78 = 78\n")] + "    return 0\n" + "\n" * 420
    )
    assert long_files(tmp_path) == ["long.py"]
    assert long_functions(tmp_path) == ["long.py:1 f"]
