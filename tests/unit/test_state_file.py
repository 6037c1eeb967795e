"""The state file: atomic and durable writes, reads with reasons, one writer per file."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from exporter import state_file
from exporter.state_file import StateFile, StateFileError, read_json, write_atomic

REPO = Path(__file__).resolve().parents[2]


def python(code: str, *args: str, **kw: Any) -> subprocess.Popen[str]:
    """Another process running ``code`` with the repository importable."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        **kw,
    )


@contextmanager
def held_by_another_process(lock: Path) -> Iterator[int]:
    """Another process holding ``lock``'s flock (as a second daemon would); its pid."""
    child = python(
        """
        import sys, time
        from pathlib import Path
        from exporter.state_file import try_lock
        try_lock(Path(sys.argv[1]))
        print("locked", flush=True)
        time.sleep(60)
        """,
        str(lock),
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        yield child.pid
    finally:
        child.kill()
        child.wait()


def can_lock_elsewhere(lock: Path) -> bool:
    """Whether another process could take ``lock`` now."""
    child = python(
        """
        import sys
        from pathlib import Path
        from exporter.state_file import StateFileError, try_lock
        try:
            try_lock(Path(sys.argv[1]))
        except StateFileError as exc:
            print(exc.reason)
        else:
            print("free")
        """,
        str(lock),
    )
    out, _ = child.communicate(timeout=30)
    return out.strip() == "free"


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    write_atomic(path, json.dumps({"a": 1}))
    write_atomic(path, json.dumps({"a": 2}))
    assert read_json(path).data == {"a": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]
    assert path.stat().st_mode & 0o777 == state_file.FILE_MODE


def test_the_data_is_fsynced_before_the_rename_and_the_directory_after(tmp_path: Path) -> None:
    # Observed through the profiler's C-call events: os.fsync itself is left alone.
    calls: list[str] = []

    def profile(_frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", "") in ("fsync", "replace"):
            calls.append(arg.__name__)

    sys.setprofile(profile)
    try:
        write_atomic(tmp_path / "state.json", "{}")
    finally:
        sys.setprofile(None)
    assert calls == ["fsync", "replace", "fsync"]


def test_a_crash_between_write_and_rename_leaves_the_old_file_and_a_whole_temporary(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, json.dumps({"generation": 1}))
    new = json.dumps({"generation": 2, "pad": "x" * 100_000})
    # The writer is killed (SIGKILL, nothing flushed at exit) just as it renames.
    child = python(
        """
        import os, signal, sys
        from pathlib import Path
        from exporter.state_file import write_atomic

        def profile(frame, event, arg):
            if event == "c_call" and getattr(arg, "__name__", "") == "replace":
                os.kill(os.getpid(), signal.SIGKILL)

        sys.setprofile(profile)
        write_atomic(Path(sys.argv[1]), sys.argv[2])
        """,
        str(path),
        new,
    )
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert read_json(path).data == {"generation": 1}  # readers never saw a half file
    (tmp,) = [p for p in tmp_path.iterdir() if p.name != "state.json"]
    assert tmp.name.startswith(".state.json.") and tmp.name.endswith(".tmp")
    assert tmp.read_text() == new  # written whole before the rename was even tried
    # The next writer of the file removes what the dead one left.
    StateFile(path).lock()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.lock"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "corrupt"),
        (b"[1, 2]", "corrupt"),
        (b"\xff\xfe", "corrupt"),
        (None, "missing"),
    ],
)
def test_reads_say_why_they_found_nothing(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    path = tmp_path / "state.json"
    if content is not None:
        path.write_bytes(content)
    found = read_json(path)
    assert (found.data, found.reason) == (None, reason) and found.detail


def test_a_path_under_a_regular_file_is_unreadable_and_unwritable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / "state.json"
    assert read_json(path).reason == "unreadable"  # ENOTDIR
    with pytest.raises(StateFileError) as caught:
        StateFile(path).write("{}")
    assert caught.value.reason == "write_failed"


def test_a_read_only_directory_is_read_only(tmp_path: Path) -> None:
    where = tmp_path / "ro"
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)]
    if subprocess.run(mount, capture_output=True, check=False).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        write_atomic(where / "state.json", '{"kept": true}')
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        file = StateFile(where / "state.json")
        with pytest.raises(StateFileError) as caught:
            file.write("{}")
        assert caught.value.reason == "read_only"
        assert file.read().data == {"kept": True}
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def test_a_file_locked_by_another_process_is_read_but_never_written(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, '{"theirs": 1}')
    file = StateFile(path)
    with held_by_another_process(file.lock_path) as pid:
        with pytest.raises(StateFileError) as caught:
            file.write('{"mine": 1}')
        assert (caught.value.reason, caught.value.detail) == ("locked", f"locked by pid {pid}")
        assert file.read().data == {"theirs": 1} and not file.locked_here
    file.write('{"mine": 1}')  # the other process is gone: this one writes now
    assert file.read().data == {"mine": 1} and file.locked_here
    assert file.lock_path.read_text().strip() == str(os.getpid())


def test_the_lock_lasts_while_anything_claims_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    file = state_file.shared(path)
    assert state_file.shared(tmp_path / "." / "state.json") is file  # one object per file

    class Owner:
        pass

    first, second = Owner(), Owner()
    file.claim(first)
    file.claim(second)
    file.write("{}")
    file.release(first)
    assert file.locked_here and not can_lock_elsewhere(file.lock_path)
    del second  # a claimant dropped without a release (a reload that was rejected)
    gc.collect()
    assert not file.locked_here and can_lock_elsewhere(file.lock_path)
    file.release(first)  # again: nothing happens


def test_write_reasons() -> None:
    cases = {30: "read_only", 28: "no_space", 122: "no_space", 13: "permission_denied"}
    for code, reason in {**cases, 5: "write_failed", 20: "write_failed"}.items():
        assert state_file.write_reason(OSError(code, "x")) == reason


def test_the_boot_id_is_read_from_its_file(tmp_path: Path) -> None:
    (tmp_path / "boot_id").write_text("3f2a\n")
    assert state_file.boot_id(tmp_path / "boot_id") == "3f2a"
    assert state_file.boot_id(tmp_path / "none") == ""
    assert state_file.boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root writes files for another user")
def test_files_root_writes_for_a_daemon_user_stay_the_daemon_users(tmp_path: Path) -> None:
    # `health clear` runs as root; the daemon as its own user, owner of the directory.
    where = tmp_path / "state"
    where.mkdir()
    os.chown(where, 65534, 65534)
    write_atomic(where / "state.json", "{}")
    fd = state_file.try_lock(where / "state.json.lock")
    state_file.unlock(fd)
    for name in ("state.json", "state.json.lock"):
        owner = (where / name).stat()
        assert (owner.st_uid, owner.st_gid) == (65534, 65534), name
