"""contrib/slurm/healthcheck.sh against a fake ``scontrol`` on PATH and the real
``accel-exporter check health`` reading a loopback server's /v1/devices."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.verdict import UNKNOWN
from tests.helpers.metrics_server import MetricsServer
from tests.unit.test_checks import U0, U1, doc, health

SCRIPT = Path(__file__).resolve().parents[2] / "contrib" / "slurm" / "healthcheck.sh"
NODE = "gpu07"

# A minimal scontrol: `show node N` prints the state and reason kept in files (as
# Slurm prints them: Reason=<text> [user@time]); `update` records the call and applies it.
FAKE_SCONTROL = r"""#!/bin/sh
dir="$FAKE_SLURM"
echo "$*" >> "$dir/calls"
case "$1" in
  show)
    echo "NodeName=$3 Arch=x86_64 CoresPerSocket=32"
    echo "   State=$(cat "$dir/state") ThreadsPerCore=2"
    if [ -s "$dir/reason" ]; then echo "   Reason=$(cat "$dir/reason") [root@2026-11-27T18:00:00]"; fi
    ;;
  update)
    shift
    for arg in "$@"; do
      case "$arg" in
        state=drain) echo "IDLE+DRAIN" > "$dir/state" ;;
        state=resume) echo "IDLE" > "$dir/state"; : > "$dir/reason" ;;
        reason=*) printf '%s\n' "${arg#reason=}" > "$dir/reason" ;;
      esac
    done
    ;;
esac
"""

FAILED = doc(health("0", U0, "ok"), health("1", U1, "failed", "xid_79", action="reboot_node"))
DEGRADED = doc(health("0", U0, "degraded", "thermal_margin_low"), health("1", U1, "ok"))
OK = doc(health("0", U0, "ok"), health("1", U1, "ok"))
# The exporter's own worker restarting: it cannot vouch for the GPUs either way.
WORKER_DOWN = doc(
    health("0", U0, UNKNOWN, why="worker restarting: crashed"),
    health("1", U1, UNKNOWN, why="worker restarting: crashed"),
    source_state="failing",
)


@pytest.fixture(scope="module")
def server() -> Iterator[MetricsServer]:
    with MetricsServer() as s:
        yield s


@pytest.fixture
def slurm(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(FAKE_SCONTROL)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "state").write_text("IDLE\n")
    (tmp_path / "reason").write_text("")
    (tmp_path / "calls").write_text("")
    return tmp_path


def run(slurm: Path, url: str, **env: str) -> None:
    full = {
        "PATH": f"{slurm / 'bin'}:{os.environ['PATH']}",
        "FAKE_SLURM": str(slurm),
        "SLURMD_NODENAME": NODE,
        "ACCEL_EXPORTER_URL": url,
        "ACCEL_EXPORTER": f"{sys.executable} -m exporter",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        **env,
    }
    done = subprocess.run(["sh", str(SCRIPT)], env=full, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr


def node(slurm: Path) -> tuple[str, str]:
    return (slurm / "state").read_text().strip(), (slurm / "reason").read_text().strip()


def updates(slurm: Path) -> list[str]:
    return [c for c in (slurm / "calls").read_text().splitlines() if c.startswith("update")]


def test_drains_with_the_reason_and_resumes_its_own_drain(slurm: Path, server: MetricsServer):
    server.body = OK
    run(slurm, server.url)
    assert node(slurm) == ("IDLE", "") and updates(slurm) == []
    server.body = FAILED
    run(slurm, server.url)
    state, reason = node(slurm)
    assert state == "IDLE+DRAIN"
    assert reason == "accel-exporter: HEALTH CRITICAL - 2 GPUs; gpu1 failed (xid_79) -> reboot_node"
    assert updates(slurm) == [f"update nodename={NODE} state=drain reason={reason}"]
    run(slurm, server.url)  # still failed: drained again, same reason, no resume
    assert node(slurm) == (state, reason)
    server.body = DEGRADED  # a warning is no reason to keep it drained (default: critical)
    run(slurm, server.url)
    assert node(slurm) == ("IDLE", "")
    assert updates(slurm)[-1] == f"update nodename={NODE} state=resume"


def test_never_resumes_or_rewords_a_drain_it_did_not_make(slurm: Path, server: MetricsServer):
    (slurm / "state").write_text("MIXED+DRAIN\n")
    (slurm / "reason").write_text("bad DIMM, ticket 4711\n")
    for body in (OK, FAILED, OK):
        server.body = body
        run(slurm, server.url)
    assert node(slurm) == ("MIXED+DRAIN", "bad DIMM, ticket 4711")
    assert updates(slurm) == []


def test_an_unreachable_exporter_changes_nothing(slurm: Path, server: MetricsServer):
    server.body = FAILED
    run(slurm, server.url)
    drained = node(slurm)
    run(slurm, "http://127.0.0.1:1")  # UNKNOWN: neither resume nor drain
    assert node(slurm) == drained and len(updates(slurm)) == 1


def test_a_crash_of_the_exporter_neither_drains_nor_resumes(slurm: Path, server: MetricsServer):
    server.body = WORKER_DOWN
    run(slurm, server.url)  # UNKNOWN: a crash of ours drains no healthy node
    assert node(slurm) == ("IDLE", "") and updates(slurm) == []
    server.body = FAILED
    run(slurm, server.url)
    drained = node(slurm)
    server.body = WORKER_DOWN
    run(slurm, server.url)  # nor does it resume a failed one
    assert node(slurm) == drained and len(updates(slurm)) == 1


def test_drain_on_warning_when_asked(slurm: Path, server: MetricsServer):
    server.body = DEGRADED
    run(slurm, server.url, ACCEL_EXPORTER_DRAIN_ON="warning")
    assert node(slurm) == (
        "IDLE+DRAIN",
        "accel-exporter: HEALTH WARNING - 2 GPUs; gpu0 degraded (thermal_margin_low)",
    )
    server.body = OK
    run(slurm, server.url, ACCEL_EXPORTER_DRAIN_ON="warning")
    assert node(slurm) == ("IDLE", "")
