"""The fake libamd_smi.so: complete symbol set, shared layout, and loud failure on ABI drift."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fakes.amdsmi import gen_header, gen_stubs, state


def test_every_symbol_the_wrapper_binds_is_exported(amdsmi_root: Path) -> None:
    names = [n for n, _ in gen_stubs.symbols(gen_stubs.wrapper_source().read_text())]
    assert len(names) > 150  # amdsmi 7.0 binds 184
    lib = ctypes.CDLL(str(amdsmi_root / "lib" / "libamd_smi.so"))
    missing = [n for n in names if not hasattr(lib, n)]
    assert missing == []


def test_python_and_c_agree_on_the_state_layout(amdsmi_root: Path) -> None:
    lib = ctypes.CDLL(str(amdsmi_root / "lib" / "libamd_smi.so"))
    assert lib.fake_amdsmi_state_size() == ctypes.sizeof(state.State)


class Inner(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("a", ctypes.c_uint8), ("PADDING_0", ctypes.c_ubyte * 3), ("b", ctypes.c_uint32)]


class Outer(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("inner", Inner * 2),
        ("bits", ctypes.c_uint64, 3),
        ("rest", ctypes.c_uint64, 61),
        ("grid", ctypes.c_uint16 * 4 * 2),
        ("name", ctypes.c_char * 5),
        ("ptr", ctypes.POINTER(ctypes.c_char)),
    ]


def _compile(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is required"
    src = tmp_path / "t.c"
    src.write_text(
        "#include <stddef.h>\n#include <stdint.h>\n" + text + "\nint main(void){return 0;}\n"
    )
    return subprocess.run(
        [gcc, "-std=gnu11", "-c", str(src), "-o", str(tmp_path / "t.o")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _render(*classes: type) -> str:
    lines = []
    for cls in classes:
        lines.append(f"typedef struct {cls.__name__} {cls.__name__};")
        lines += gen_header.render_aggregate(cls)
    return "\n".join(lines)


def test_generated_typedefs_match_ctypes_layout(tmp_path: Path) -> None:
    text = _render(Inner, Outer)
    assert f"sizeof(Outer) == {ctypes.sizeof(Outer)}" in text
    assert "offsetof(Outer, grid) == 24" in text
    result = _compile(tmp_path, text)
    assert result.returncode == 0, result.stderr


def test_a_layout_mismatch_breaks_the_build(tmp_path: Path) -> None:
    drifted = _render(Inner, Outer).replace(
        "offsetof(Outer, grid) == 24", "offsetof(Outer, grid) == 28"
    )
    result = _compile(tmp_path, drifted)
    assert result.returncode != 0
    assert "offset of Outer.grid drifted" in result.stderr


def test_unknown_ctypes_types_are_refused() -> None:
    with pytest.raises(SystemExit):
        gen_header.c_type(ctypes.c_wchar)
