"""The libcuda maps scan of the checkpoint backend: what it reads, and what it remembers."""

from __future__ import annotations

from exporter.backends.cuda_checkpoint import NEGATIVE_TTL_SECONDS, CudaCheckpointBackend
from exporter.enrich.procfs import ProcReader
from tests.helpers.fakeproc import FakeProc

LIBCUDA_MAP = "7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.570.86.10\n"
LIBC_MAP = "7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"


class CountingReader(ProcReader):
    """Counts the maps files read (each read takes the target's mmap lock)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.read_maps: list[int] = []

    def maps_mention(self, pid: int, needle: bytes) -> bool:
        self.read_maps.append(pid)
        return super().maps_mention(pid, needle)


def test_processes_without_libcuda_are_read_once_per_life(tmp_path):
    proc = FakeProc(tmp_path / "proc")
    proc.add(100, maps=LIBC_MAP)
    proc.add(101, maps=LIBC_MAP)
    proc.add(102, maps=LIBCUDA_MAP)
    now = [0.0]
    backend = CudaCheckpointBackend({"proc_path": str(proc.root)}, clock=lambda: now[0])
    reader = backend.reader = CountingReader(str(proc.root))

    def scan() -> tuple[list[int], set[int]]:
        reader.read_maps.clear()
        return backend._candidates([], scan_maps=True)

    assert scan() == ([102], {102})
    assert sorted(reader.read_maps) == [100, 101, 102]
    # Only the libcuda process is read again (a CUDA process stays a candidate anyway).
    now[0] = 30.0
    assert scan() == ([102], {102}) and reader.read_maps == [102]
    # A reused pid (later start time) and a new process are read; the others are not.
    proc.add(101, maps=LIBCUDA_MAP, starttime=5000)
    proc.add(103, maps=LIBC_MAP)
    now[0] = 60.0
    assert scan() == ([101, 102], {101, 102})
    assert sorted(reader.read_maps) == [101, 102, 103]
    # An ended process is forgotten; after the TTL everything is read again.
    proc.remove(100)
    now[0] = 60.0 + NEGATIVE_TTL_SECONDS
    scan()
    assert sorted(reader.read_maps) == [101, 102, 103]
    assert 100 not in backend._no_libcuda


def test_start_time_survives_a_command_name_with_parentheses(tmp_path):
    proc = FakeProc(tmp_path / "proc")
    proc.add(7, starttime=123456)
    assert ProcReader(str(proc.root)).start_time(7) == "123456"
    assert ProcReader(str(proc.root)).start_time(8) is None
