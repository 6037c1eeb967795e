"""Every fake node's exposition, before and after a change, compared line by line. By hand:

    .venv/bin/python bench/exposition.py --baseline REV [--nodes nvidia,amd,...] [--profile full]

The baseline revision is checked out into a temporary git worktree. For each fake node
of ``tests/helpers/nodes.py`` (8 NVIDIA GPUs with NVLinks, 8 MI300X, 64 CPX partitions,
Intel, Gaudi, TPU, Neuron), a daemon of each tree (its own code, its own fakes) serves the
node until its sample count settles, and its ``/metrics`` is kept. The two texts are
then compared the way a dashboard or an alert would notice a difference:

- ``text``: every line but the sample values (HELP, TYPE, names, label sets, order) must
  be identical, byte for byte. Left out: ``process_*`` (the process's own figures),
  ``accel_exporter_*`` (poll durations, render sizes: they vary run to run) and
  ``accel_host_*`` (the build machine's own CPU and memory);
- ``values``: the samples of every other family compared by value, where a fake gives a
  stable one (counters and timestamps move with time and are left out).

Output: JSON, per node, ``identical`` (bool), the first differing lines of each side and
the value differences, so a reviewer sees at once what a change renamed on purpose and
what it changed by accident.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = re.compile(r"^(# (HELP|TYPE) )?(process_|accel_exporter_|accel_host_)")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (\S+)$")
# Fakes listen on a loopback port of the moment (the TPU runtime's address label).
PORT = re.compile(r"127\.0\.0\.1:\d+")
DEFAULT_NODES = ("nvidia", "amd", "amd_cpx", "intel", "gaudi", "tpu", "neuron")


def dump(nodes: list[str], profile: str, out: Path) -> None:
    """Serve each node with this tree's daemon and write ``<out>/<node>.prom``."""
    sys.path.insert(0, os.environ.get("PYTHONPATH", str(ROOT)).split(os.pathsep)[0])
    from tests.helpers.daemon import Daemon
    from tests.helpers.nodes import node
    from tests.helpers.series import settled

    for kind in nodes:
        with tempfile.TemporaryDirectory(prefix=f"expo-{kind}-") as tmp:
            work = Path(tmp)
            with node(kind, work / "node") as fake:
                config = {**fake.config, "outputs": {"prometheus": {"profile": profile}}}
                d = Daemon(work, config, env=fake.env).start(wait=60)
                try:
                    d.wait_metric("accel_devices", fake.devices, timeout=120, vendor=fake.vendor)
                    d.wait_metric("accel_exporter_source_up", 1, timeout=120, source=fake.source)
                    (out / f"{kind}.prom").write_text(settled(d.metrics))
                finally:
                    d.__exit__()


def masked(text: str) -> list[str]:
    """The lines a dashboard depends on, sample values replaced by ``V``."""
    lines = []
    for line in PORT.sub("127.0.0.1:PORT", text).splitlines():
        if not line or VOLATILE.match(line):
            continue
        m = SAMPLE.match(line)
        lines.append(f"{m.group(1)} V" if m else line)
    return lines


def values(text: str) -> dict[str, str]:
    """Stable samples by series: gauges and info rows, not counters or timestamps."""
    kinds: dict[str, str] = {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            kinds[name] = kind
        elif line and not line.startswith("#") and not VOLATILE.match(line):
            m = SAMPLE.match(line)
            if not m:
                continue
            name = m.group(1).split("{", 1)[0]
            family = name
            if kinds.get(family) is None:
                family = re.sub(r"_(total|created|bucket|sum|count|info)$", "", name)
            kind = kinds.get(name) or kinds.get(family, "")
            if kind in ("counter", "histogram", "summary") or "timestamp" in name:
                continue
            out[m.group(1)] = m.group(2)
    return out


def compare(before: str, after: str) -> dict[str, Any]:
    """Line and value differences between two expositions of one node."""
    a, b = masked(before), masked(after)
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    va, vb = values(before), values(after)
    changed = {k: (va[k], vb[k]) for k in va.keys() & vb.keys() if va[k] != vb[k]}
    return {
        "identical": first is None and not changed,
        "lines": [len(a), len(b)],
        "only_before": sorted(set(a) - set(b))[:20],
        "only_after": sorted(set(b) - set(a))[:20],
        "first_difference": None if first is None else [a[first : first + 3], b[first : first + 3]],
        "values_changed": dict(sorted(changed.items())[:20]),
        "values_changed_count": len(changed),
    }


def main(argv: list[str] | None = None) -> int:
    """Compare the baseline's expositions with this tree's and print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="git revision before the change")
    parser.add_argument("--nodes", default=",".join(DEFAULT_NODES))
    parser.add_argument("--profile", default="full")
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # one tree's side
    args = parser.parse_args(argv)
    nodes = args.nodes.split(",")
    if args.dump:
        dump(nodes, args.profile, args.dump)
        return 0
    if not args.baseline:
        parser.error("--baseline is required")
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.baseline],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    report: dict[str, Any] = {"baseline": rev, "profile": args.profile}
    with tempfile.TemporaryDirectory(prefix="bench-expo-") as tmp:
        before_tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before_tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            for side, tree in (("before", before_tree), ("after", ROOT)):
                out = Path(tmp) / side
                out.mkdir()
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--nodes",
                        args.nodes,
                        "--profile",
                        args.profile,
                        "--dump",
                        str(out),
                    ],
                    check=True,
                    cwd=tree,
                    env=dict(os.environ, PYTHONPATH=str(tree)),
                )
            for kind in nodes:
                report[kind] = compare(
                    (Path(tmp) / "before" / f"{kind}.prom").read_text(),
                    (Path(tmp) / "after" / f"{kind}.prom").read_text(),
                )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before_tree)],
                check=False,
            )
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
