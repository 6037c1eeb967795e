"""The shared state file of a fake vendor library: mapped by the library and the test.

A fake's state is one C struct in a file whose path the library reads from an
environment variable; the test maps the same file, so a change (a value, a
lost device, a hung call) applies at once, even inside a running daemon. The
levelzero and hlml fakes share this shape: a magic, a device count, the fault
rules (``fault_rules.h``), then the devices (``ze_fake_state.h``,
``hlml_fake_state.h``).
"""

from __future__ import annotations

import ctypes
import importlib
import mmap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

from tests.fakes.fault_rules import FaultRules
from tests.helpers.backend_harness import Backends, backends
from tests.helpers.native import built_once

T = TypeVar("T", bound="StateFile")


class StateFile(FaultRules):
    """A mapped state file; subclasses name the struct, the magic and the env variable."""

    STATE: ClassVar[type[ctypes.Structure]]
    MAGIC: ClassVar[int]
    ENV: ClassVar[str]

    def __init__(self, path: Path, mem: mmap.mmap) -> None:
        self.path = path
        self._mem = mem
        self.state: Any = self.STATE.from_buffer(mem)

    @classmethod
    def new(cls: type[T], path: Path, devices: int) -> T:
        """A zeroed state file with the magic and ``devices`` set."""
        size = ctypes.sizeof(cls.STATE)
        path.write_bytes(bytes(size))
        with path.open("r+b") as f:
            mem = mmap.mmap(f.fileno(), size)
        fake = cls(path, mem)
        fake.state.magic = cls.MAGIC
        fake.state.devices = devices
        return fake

    @property
    def env(self) -> dict[str, str]:
        """What the library (in a worker) needs to find this state."""
        return {self.ENV: str(self.path)}

    def device(self, i: int) -> Any:
        """Device ``i``'s live record."""
        return self.state.dev[i]


def layout_problems(lib: Path, symbol: str, want: list[int]) -> list[str]:
    """Where ``want`` (sizes and offsets from the ctypes mirror) differs from what the
    library's ``symbol(uint64_t *out)`` reports from C (empty: they agree)."""
    out = (ctypes.c_uint64 * len(want))()
    getattr(ctypes.CDLL(str(lib)), symbol)(out)
    return [f"item {i}: C {c} != ctypes {p}" for i, (c, p) in enumerate(zip(out, want)) if c != p]


def fixtures(
    name: str,
    create: Callable[[Path, int], StateFile],
    build: Callable[[Path], Path],
    devices: int,
    backend: str,
) -> tuple[Any, ...]:
    """The pytest fixtures of one state-file fake, named after ``name``:

    - ``<name>_lib`` (session): the library, built once;
    - ``<name>_fake``: ``create(path, devices)`` in this test's folder; its rules (and
      so its hung calls) cleared at teardown;
    - ``<name>_inprocess``: that fake, chosen for this process's library (its
      ``env`` set; the library reads it at init);
    - ``<name>_backends``: :class:`Backends` of ``backend`` ("module:Class", imported
      when first used) on ``<name>_lib``, closed at teardown.

    A fixtures module binds them to module names for pytest to find.
    """

    @pytest.fixture(scope="session", name=f"{name}_lib")
    def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return built_once(name, build, tmp_path_factory.mktemp(name))

    @pytest.fixture(name=f"{name}_fake")
    def state(tmp_path: Path) -> Iterator[StateFile]:
        made = create(tmp_path / f"{name}-state.bin", devices)
        yield made
        made.clear_rules()

    @pytest.fixture(name=f"{name}_inprocess")
    def inprocess(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> StateFile:
        made: StateFile = request.getfixturevalue(f"{name}_fake")
        for key, value in made.env.items():
            monkeypatch.setenv(key, value)
        return made

    @pytest.fixture(name=f"{name}_backends")
    def made_backends(request: pytest.FixtureRequest) -> Iterator[Backends[Any]]:
        module, cls = backend.split(":")
        library = request.getfixturevalue(f"{name}_lib")
        cls_of = getattr(importlib.import_module(module), cls)
        with backends(cls_of, library_path=str(library)) as made:
            yield made

    return lib, state, inprocess, made_backends
