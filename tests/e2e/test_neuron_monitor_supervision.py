"""neuron-monitor under the one child supervisor: it never outlives the daemon.

The fake neuron-monitor (tests/fakes/neuron) records each life's pid. A daemon that is
SIGKILLed cannot stop its child, so the child must go by itself: its death signal
(PR_SET_PDEATHSIG, set before the program runs) ends it, as it ends a worker. A child
that ignores SIGTERM is killed and reaped when the daemon stops.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from tests.e2e.test_neuron_daemon import config
from tests.fakes.neuron.control import FakeMonitor, make_host
from tests.helpers.wait import eventually


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def running_monitor(d: Any, monitor: FakeMonitor) -> int:
    """The pid of the monitor's current life, once it has printed a report."""
    d.wait_for(lambda: monitor.printed >= 1, timeout=30, what="a first report")
    pid = monitor.pids[-1]
    assert alive(pid) and pid in d.descendants()
    return pid


def start(daemon_factory: Any, tmp_path: Path, **scenario: Any) -> tuple[Any, FakeMonitor]:
    host = make_host(tmp_path / "host", 2)
    monitor = FakeMonitor(tmp_path / "scenario.json")
    monitor.set(devices=2, cores_per_device=2, **scenario)
    return daemon_factory(config(host, command=monitor.command)), monitor


def test_a_sigkilled_daemon_leaves_no_neuron_monitor_behind(daemon_factory, tmp_path):
    # One report, then silent and alive: it never writes to the dead daemon's pipe
    # (which would end it by SIGPIPE), as neuron-monitor between periods does not.
    d, monitor = start(daemon_factory, tmp_path, limit=1)
    pid = running_monitor(d, monitor)
    try:
        d.signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
        eventually(lambda: not alive(pid), timeout=10, what=f"neuron-monitor {pid} gone")
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_a_neuron_monitor_that_ignores_sigterm_is_killed_when_the_daemon_stops(
    daemon_factory, tmp_path
):
    d, monitor = start(daemon_factory, tmp_path, ignore_term=True)
    pid = running_monitor(d, monitor)
    code, _ = d.stop()
    assert code == 0  # within Daemon.stop's deadline, not killed by it
    assert not alive(pid)
    assert d.leftover_children() == set()
