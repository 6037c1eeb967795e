"""Committed protobuf gencode must be exactly what protoc makes of the committed .proto."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpc_tools import protoc


def assert_gencode_fresh(proto_dir: Path, stem: str, tmp_path: Path) -> None:
    """Regenerate ``<stem>_pb2.py`` and ``.pyi`` from ``<stem>.proto``; fail when they differ."""
    shutil.copy(proto_dir / f"{stem}.proto", tmp_path)
    status = protoc.main(
        [
            "protoc",
            f"-I{tmp_path}",
            f"-I{Path(protoc.__file__).parent / '_proto'}",  # the well-known types
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(tmp_path / f"{stem}.proto"),
        ]
    )
    assert status == 0
    for name in (f"{stem}_pb2.py", f"{stem}_pb2.pyi"):
        assert (tmp_path / name).read_text() == (proto_dir / name).read_text(), (
            f"{name} is stale: regenerate it (see {proto_dir / '__init__.py'})"
        )
