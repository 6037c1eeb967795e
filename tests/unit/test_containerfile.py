"""The Containerfile parses, copies only what exists, and builds what it claims to.

No container engine runs here, so the test reads the instructions the way a
builder does (continuations, stages, exec form) and then performs the build
stage's Python step itself on a context assembled from the COPY instructions.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

from tests.helpers.deploy import REPO

CONTAINERFILE = REPO / "Containerfile"
IGNORE_FILE = REPO / ".dockerignore"
INSTRUCTIONS = {
    "FROM",
    "RUN",
    "CMD",
    "LABEL",
    "MAINTAINER",
    "EXPOSE",
    "ENV",
    "ADD",
    "COPY",
    "ENTRYPOINT",
    "VOLUME",
    "USER",
    "WORKDIR",
    "ARG",
    "ONBUILD",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "SHELL",
}
COMPILERS = ("gcc", "g++", "clang", "build-essential", "cc ", "make ", "golang", "rustc", "cargo")


@dataclass
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse(text: str) -> tuple[list[Instruction], list[Stage]]:
    """Instructions (continuations joined, comments dropped) and the stages they form."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are skipped by builders
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        instructions.append(Instruction(start, keyword, args.strip()))
        pending = ""
    assert not pending, "the file ends inside a line continuation"
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword.upper() == "FROM":
            parts = ins.args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            assert len(parts) in (1, 3), f"line {ins.line}: FROM image [AS name]"
            stages.append(Stage(parts[0], name))
        elif stages:
            stages[-1].instructions.append(ins)
    return instructions, stages


def copy_sources(ins: Instruction) -> tuple[str | None, list[str], str]:
    """(--from stage or None, sources, destination) of a COPY/ADD."""
    words = shlex.split(ins.args)
    from_stage = None
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            from_stage = flag.split("=", 1)[1]
    assert len(words) >= 2, f"line {ins.line}: COPY needs a source and a destination"
    return from_stage, words[:-1], words[-1]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins, ! re-includes."""
    result = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if any(
            fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, pat.replace("**/", ""))
            for p in prefixes
        ):
            result = not negate
    return result


def ignore_patterns() -> list[str]:
    lines = IGNORE_FILE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


INSTRUCTION_LIST, STAGES = parse(CONTAINERFILE.read_text())
FINAL = STAGES[-1]


def final(keyword: str) -> list[Instruction]:
    return [i for i in FINAL.instructions if i.keyword == keyword]


def test_every_instruction_is_known_and_upper_case() -> None:
    assert INSTRUCTION_LIST
    for ins in INSTRUCTION_LIST:
        assert ins.keyword in INSTRUCTIONS, f"line {ins.line}: unknown instruction {ins.keyword}"


def test_multi_stage_with_a_named_build_stage() -> None:
    assert len(STAGES) >= 2
    names = [s.name for s in STAGES[:-1]]
    assert all(names), "every stage but the last is named"
    for stage in STAGES:
        for ins in stage.instructions:
            if ins.keyword in ("COPY", "ADD"):
                from_stage, _, _ = copy_sources(ins)
                assert from_stage is None or from_stage in names, f"line {ins.line}"
    # Build arguments used in FROM are declared before the first FROM.
    first_from = next(i for i, ins in enumerate(INSTRUCTION_LIST) if ins.keyword == "FROM")
    declared = {i.args.split("=")[0] for i in INSTRUCTION_LIST[:first_from] if i.keyword == "ARG"}
    for stage in STAGES:
        if stage.base.startswith("${"):
            assert stage.base[2:-1] in declared


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    patterns = ignore_patterns()
    checked = 0
    for ins in INSTRUCTION_LIST:
        if ins.keyword not in ("COPY", "ADD"):
            continue
        from_stage, sources, _ = copy_sources(ins)
        if from_stage is not None:
            continue
        for source in sources:
            path = REPO / source
            assert path.exists(), f"line {ins.line}: {source} does not exist"
            assert not ignored(source, patterns), f"line {ins.line}: {source} is in .dockerignore"
            checked += 1
    assert checked >= 2


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = ignore_patterns()
    for path in (
        ".venv/bin/python",
        ".git/config",
        "tests/conftest.py",
        "helm/accel-exporter/Chart.yaml",
        "exporter/__pycache__/cli.cpython-311.pyc",
    ):
        assert ignored(path, patterns), path
    assert not ignored("exporter/cli.py", patterns)


def test_final_image_runs_unprivileged_without_compilers() -> None:
    (user,) = final("USER")
    uid = user.args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, (
        "a numeric non-root UID (Kubernetes runAsNonRoot checks it)"
    )
    for ins in final("RUN"):
        text = ins.args.lower()
        assert "apt-get install" not in text and "pip install" not in text, f"line {ins.line}"
        assert not any(c in text for c in COMPILERS), f"line {ins.line}: {ins.args}"
    # Only the built environment comes from the build stage.
    copies = [copy_sources(i) for i in final("COPY")]
    assert copies and all(from_stage == STAGES[0].name for from_stage, _, _ in copies)
    assert STAGES[-1].base == STAGES[0].base, "same base: the copied venv's interpreter exists"


def test_entrypoint_is_the_daemon_in_exec_form() -> None:
    (entrypoint,) = final("ENTRYPOINT")
    assert json.loads(entrypoint.args) == ["accel-exporter"]
    (cmd,) = final("CMD")
    assert json.loads(cmd.args) == ["run"]
    (expose,) = final("EXPOSE")
    assert expose.args == "9842"


def test_the_build_installs_every_runtime_extra() -> None:
    # Pod attribution (k8s: grpcio and the protobuf runtime the committed gencode needs)
    # and the CUDA checkpoint source (cuda: cuda-bindings) must work in the image too;
    # only the development extra stays out.
    build = STAGES[0]
    installs = [
        i.args for i in build.instructions if i.keyword == "RUN" and "pip install" in i.args
    ]
    assert len(installs) == 1
    extras = installs[0].split('".[', 1)[1].split(']"', 1)[0].split(",")
    declared = metadata.metadata("accel-exporter").get_all("Provides-Extra") or []
    assert {"nvidia", "amd", "otlp", "k8s", "cuda"} <= set(declared)
    assert sorted(extras) == sorted(set(declared) - {"dev"})


@pytest.mark.timeout(300)
def test_the_copied_context_builds_the_package(tmp_path: Path) -> None:
    # The build stage's pip step, offline: a wheel from exactly the paths COPY sends.
    context = tmp_path / "context"
    for ins in STAGES[0].instructions:
        if ins.keyword != "COPY":
            continue
        _, sources, _ = copy_sources(ins)
        for source in sources:
            src, dst = REPO / source, context / source
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(src, dst)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "dist").glob("accel_exporter-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "accel-exporter = exporter.cli:main" in zf.read(entry_points).decode()
    assert "exporter/cli.py" in names and "exporter/py.typed" in names
