"""A CPER state directory that cannot be read or written: the daemon (subprocess) against the
fake amdsmi serves, /status says what it costs, a counter counts it, and the daemon's own
ledger still keeps a worker kill from counting an AFID twice. Read-only and full directories
are small tmpfs mounts (skipped where this process may not mount)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_amdsmi_ras_daemon import KINDS, config, wait_counts
from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.daemon import Daemon, value


@contextmanager
def tmpfs(path: Path, *, read_only: bool = False, full: bool = False) -> Iterator[Path]:
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)]
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        if full:
            with open(path / "filler", "wb", buffering=0) as filler:
                try:
                    while True:
                        filler.write(b"\0" * 4096)
                except OSError:
                    pass
        if read_only:
            remount = ["mount", "-o", "remount,ro", str(path)]
            subprocess.run(remount, capture_output=True, check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextmanager
def garbage(path: Path) -> Iterator[Path]:
    path.mkdir()
    (path / "amdsmi-cper.json").write_text('{"format": 1, "devices": {"x": [tru')
    yield path


CASES = {
    "garbage": (garbage, "corrupt", "the file found at start was ignored (corrupt"),
    "read_only": (lambda p: tmpfs(p, read_only=True), "read_only", "not persisted: read_only"),
    "full": (lambda p: tmpfs(p, full=True), "no_space", "not persisted: no_space"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_state_dir_problem_is_shown_counted_and_costs_no_double_count(
    case: str,
    daemon_factory: Any,
    amdsmi_env: dict[str, str],
    amdsmi_fake: FakeAmdSmi,
    tmp_path: Path,
) -> None:
    make, reason, says = CASES[case]
    dev = amdsmi_fake.device(0)
    state.cper(dev, KINDS)
    dev.cper_count = 120
    uuid = expected.uuid(dev)
    with make(tmp_path / "state") as state_dir:
        d: Daemon = daemon_factory(config=config(state_dir), env=amdsmi_env)
        wait_counts(d, uuid, 120)
        cper_state = d.status()["sources"]["amdsmi"]["cper_state"]
        assert says in cper_state, cper_state
        assert "CPER records" in cper_state and "again" in cper_state  # what it costs
        errors = value(d.metrics(), "accel_exporter_state_errors_total", source="amdsmi",
                       reason=reason)  # fmt: skip
        assert errors is not None and errors >= 1
        # A worker killed mid-stream: the daemon's ledger, not the file, says where to go on.
        (worker,) = d.workers()
        os.kill(worker, signal.SIGKILL)
        dev.cper_count = 150
        d.wait_for(lambda: d.workers() and worker not in d.workers(), 40, what="a new worker")
        wait_counts(d, uuid, 150)
        assert d.get("/metrics").status == 200
        if case == "garbage":  # writable: the next save replaced the garbage
            assert (state_dir / "amdsmi-cper.json").read_text().startswith("{")
        code, _ = d.stop()
        assert code == 0
