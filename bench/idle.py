"""Idle cost of this daemon and of nvitop-exporter on one fake 16-GPU node, printed as JSON.

Run by hand (needs network access to PyPI once, for the peer's venv):

    .venv/bin/python bench/idle.py [--devices 16] [--window 60] [--scrape 5] [--rounds 3]
        [--profile full] [--tree DIR --tree DIR2 ...]

Every exporter loads the same fake NVML (tests/fakes/nvml, one shared state file), runs
side by side with the others, and is scraped every ``--scrape`` seconds over the same
``--window`` seconds by the same scraper (so all meet the same background load). This
daemon runs its default sources with the host source at 1 s (nvml at its default
interval), from a venv of its own under ``DIR/.tools/accel-exporter`` for each
``--tree`` (a checkout; default this one; several compare commits in one window),
installed the way ``scripts/run`` does (editable, every runtime extra, no dev extra:
the dev extra brings packages such as ``rich``, through tpu-info, that structlog
imports whenever they are installed, which a node's install does not have), run from
a directory of its own so that it and its workers import that tree's code;
nvitop-exporter (installed from PyPI into a venv of its own under ``--peer-venv``)
runs with its default 1 s update interval. ``--rounds`` repeats the whole (fresh
processes each round).

Per exporter and round: ``cpu_percent`` (CPU of the process and its descendants over
the window, in percent of one core, from ``/proc/<pid>/stat``: robust to the load of
a shared machine), ``wakeups_per_second`` (context switches of all their threads),
``threads``, ``main_rss_mib`` (the main process), ``worker_rss_mib`` (each
descendant), ``pss_mib`` (the process and its descendants, ``smaps_rollup``),
``private_mib`` (their memory no other process maps: PSS also splits the pages of
libpython and libcrypto among every process on the machine that maps them, so it
moves with unrelated load), and ``samples`` (series in the last scrape).
Targets (issue 39): cpu_percent <= 1.0 and no higher than the peer's; main_rss_mib <= 30.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.nvml.control import FakeNvml, build  # noqa: E402
from tests.helpers.daemon import Daemon, descendants_of  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PEER = "nvitop-exporter==1.7.2"
# What scripts/run installs (its EXTRAS default).
EXTRAS = "nvidia,amd,intel,tpu,otlp,k8s,cuda,nvsentinel"
CONFIG = {"sources": {"host": {"interval": "1s"}}}


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def switches(pid: int) -> int:
    """Context switches of every thread of ``pid`` so far: about one per wake-up."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


def rollup_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def private_kib(pid: int) -> int:
    """Memory of ``pid`` no other process maps (USS): unlike PSS, whatever else runs."""
    return rollup_kib(pid, "Private_Clean") + rollup_kib(pid, "Private_Dirty")


def tree(pid: int) -> list[int]:
    return [pid, *sorted(descendants_of(pid))]


def scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read().decode()
    return sum(1 for line in body.splitlines() if line and not line.startswith("#"))


def measure(targets: dict[str, tuple[int, str]], window: float, every: float) -> dict[str, Any]:
    """Scrape every target every ``every`` seconds for ``window``, all in the same window
    (so both meet the same background load); each process tree's cost meanwhile."""
    samples = {name: scrape(url) for name, (_, url) in targets.items()}
    cpu0 = {name: sum(map(cpu_seconds, tree(pid))) for name, (pid, _) in targets.items()}
    wakes0 = {name: sum(map(switches, tree(pid))) for name, (pid, _) in targets.items()}
    began = next_at = time.monotonic()
    while time.monotonic() - began < window:
        samples = {name: scrape(url) for name, (_, url) in targets.items()}
        next_at += every
        time.sleep(max(0.0, next_at - time.monotonic()))
    elapsed = time.monotonic() - began
    out = {}
    for name, (pid, _) in targets.items():
        pids = tree(pid)
        cpu = sum(map(cpu_seconds, pids)) - cpu0[name]
        out[name] = {
            "cpu_percent": round(100 * cpu / elapsed, 2),
            "wakeups_per_second": round((sum(map(switches, pids)) - wakes0[name]) / elapsed, 1),
            "threads": sum(len(list(Path(f"/proc/{p}/task").iterdir())) for p in pids),
            "main_rss_mib": round(rollup_kib(pid, "Rss") / 1024, 1),
            "worker_rss_mib": [round(rollup_kib(p, "Rss") / 1024, 1) for p in pids[1:]],
            "pss_mib": round(sum(rollup_kib(p, "Pss") for p in pids) / 1024, 1),
            "private_mib": round(sum(map(private_kib, pids)) / 1024, 1),
            "processes": len(pids),
            "samples": samples[name],
        }
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def peer_venv(path: Path) -> Path:
    """The peer's venv (made and filled from PyPI on first use); its exporter command."""
    exe = path / "bin" / "nvitop-exporter"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", PEER], check=True)
    return exe


def daemon_venv(path: Path, root: Path = ROOT) -> Path:
    """A venv holding the checkout ``root`` as scripts/run installs it; its python.

    Reinstalled only when pyproject.toml changed (the code itself is editable).
    """
    python = path / "bin" / "python"
    stamp = path / ".accel-exporter-installed"
    want = f"{hashlib.sha256((root / 'pyproject.toml').read_bytes()).hexdigest()} {EXTRAS}"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    if not stamp.exists() or stamp.read_text() != want:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-e", f"{root}[{EXTRAS}]"], check=True
        )
        stamp.write_text(want)
    return python


class InstalledDaemon(Daemon):
    """The test helper's daemon, run by another venv's interpreter, from a directory of
    its own: ``python -m`` and the workers it spawns import the venv's tree, never the
    one the helper runs from (its cwd and PYTHONPATH)."""

    def __init__(self, python: Path, tmp_path: Path, *args: Any, **kwargs: Any) -> None:
        # Empty: ignored. Bytecode is written and read as on a node (a shell's
        # PYTHONDONTWRITEBYTECODE would have every start compile every module).
        kwargs["env"] = {**kwargs.get("env", {}), "PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": ""}
        super().__init__(tmp_path, *args, **kwargs)
        self.python = python
        self.run_in = tmp_path

    def command(self) -> list[str]:
        run = (
            f"import os, runpy; os.chdir({str(self.run_in)!r}); "
            "runpy.run_module('exporter', run_name='__main__', alter_sys=True)"
        )
        launched = super().command()
        return [str(self.python), "-c", run, *launched[launched.index("--") + 1 :]]


def start_peer(fake: FakeNvml, venv: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(peer_venv(venv)), "--bind-address", "127.0.0.1", "--port", str(port)],
        env={**os.environ, **fake.env()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    wait_for(lambda: scrape(url) > 0, "nvitop-exporter")
    return proc, url


def one_round(
    fake: FakeNvml, work: Path, trees: list[Path], args: argparse.Namespace, config: dict[str, Any]
) -> dict[str, Any]:
    """A daemon of each tree and the peer side by side, measured in one window."""
    daemons: dict[str, InstalledDaemon] = {}
    proc = None
    try:
        for i, root in enumerate(trees):
            python = daemon_venv(root / ".tools" / "accel-exporter", root)
            run_in = work / f"tree-{i}"
            run_in.mkdir(exist_ok=True)
            d = InstalledDaemon(python, run_in, config, env=fake.env())
            daemons["ours" if len(trees) == 1 else f"ours:{root.name}"] = d.start()
        last = str(args.devices - 1)
        for d in daemons.values():
            d.wait_metric("accel_device_up", 1, device=last, uuid=fake.uuid(args.devices - 1))
        proc, peer_url = start_peer(fake, args.peer_venv)
        time.sleep(6)  # past the first slow poll and every start-up
        targets = {name: (d.pid, d.url + "/metrics") for name, d in daemons.items()}
        targets["nvitop_exporter"] = (proc.pid, peer_url)
        load = os.getloadavg()[0]
        return {"load_average_1m": load, **measure(targets, args.window, args.scrape)}
    finally:
        for d in daemons.values():
            d.stop()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    """Measure the exporters and print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--scrape", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="a checkout to run (repeatable; default this one), from DIR/.tools/accel-exporter",
    )
    parser.add_argument("--peer-venv", type=Path, default=ROOT / ".tools" / "nvitop-exporter")
    parser.add_argument(
        "--profile", help="outputs.prometheus.profile of this daemon (default: its default)"
    )
    args = parser.parse_args(argv)
    config: dict[str, Any] = dict(CONFIG)
    if args.profile:
        config["outputs"] = {"prometheus": {"profile": args.profile}}
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        work = Path(tmp)
        fake = FakeNvml.create(build(work / "lib"), work / "nvml-state", args.devices)
        rounds = [one_round(fake, work, trees, args, config) for _ in range(args.rounds)]
    result = {
        "devices": args.devices,
        "window_seconds": args.window,
        "scrape_seconds": args.scrape,
        "daemon_extras": EXTRAS,
        "profile": args.profile or "default",
        "trees": {str(t): git_commit(t) for t in trees},
        "rounds": rounds,
    }
    print(json.dumps(result, indent=2))
    return 0


def git_commit(root: Path) -> str:
    """The short commit of a checkout, ``+dirty`` when it has changes."""

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *a], capture_output=True, text=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--porcelain") else "")


if __name__ == "__main__":
    sys.exit(main())
