"""The shared state file of a fake vendor library: mapped by the library and the test.

A fake's state is one C struct in a file whose path the library reads from an
environment variable; the test maps the same file, so a change (a value, a
lost device, a hung call) applies at once, even inside a running daemon. The
levelzero and hlml fakes share this shape: a magic, a device count, call
rules, then the devices (``ze_fake_state.h``, ``hlml_fake_state.h``).
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path
from typing import Any, ClassVar, TypeVar

T = TypeVar("T", bound="StateFile")


class Rule(ctypes.Structure):
    """One call rule: ``fn`` (or "*") on ``device`` (-1: all) answers ``rc`` or hangs."""

    _fields_ = [
        ("active", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("rc", ctypes.c_int32),
        ("hang", ctypes.c_int32),
        ("fn", ctypes.c_char * 48),
    ]


class StateFile:
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

    def rule(self, fn: str, device: int = -1, rc: int = 0, hang: bool = False) -> int:
        """Make ``fn`` (or "*") answer ``rc`` or hang on ``device`` (-1: all); the slot."""
        for slot, r in enumerate(self.state.rules):
            if not r.active:
                r.fn, r.device, r.rc, r.hang = fn.encode(), device, rc, int(hang)
                r.active = 1
                return slot
        raise RuntimeError("no free rule slot")

    def clear(self, slot: int | None = None) -> None:
        """Clear one rule (or all): a call hung on it returns."""
        for i, r in enumerate(self.state.rules):
            if slot is None or i == slot:
                r.active = 0
                r.hang = 0


def layout_problems(lib: Path, symbol: str, want: list[int]) -> list[str]:
    """Where ``want`` (sizes and offsets from the ctypes mirror) differs from what the
    library's ``symbol(uint64_t *out)`` reports from C (empty: they agree)."""
    out = (ctypes.c_uint64 * len(want))()
    getattr(ctypes.CDLL(str(lib)), symbol)(out)
    return [f"item {i}: C {c} != ctypes {p}" for i, (c, p) in enumerate(zip(out, want)) if c != p]
