"""Samples, bytes and label widths per profile on every vendor's fake node, printed as JSON.

Usage: ``python bench/series.py [--nodes nvidia,amd,...] [--save DIR]``

For each fake node (tests/helpers/nodes.py: 8 H100-class GPUs with 18 NVLinks,
16 of them, 8 MI300X, 8 MI300X in CPX mode (64 partitions), 8 Intel Max, 8
Gaudi, 8 TPU chips, 16 Neuron devices; the host source on) and each profile, a
daemon is started with that profile and scraped once its sample count is steady:
``samples`` (lines that are not comments), ``bytes`` (text format),
``gzip_bytes``, ``families``, ``max_labels`` and the widest family, and the
daemon's own ``accel_exporter_series`` by source (which must add up to
``samples``). ``--save DIR`` writes each exposition as DIR/<node>-<profile>.prom
(bench/fleet.py serves them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.catalog.profiles import PROFILES  # noqa: E402
from tests.helpers.daemon import Daemon  # noqa: E402
from tests.helpers.nodes import NODES, Node, node  # noqa: E402
from tests.helpers.series import measure, settled  # noqa: E402


def scrape(work: Path, fake: Node, profile: str) -> str:
    """One daemon's exposition once it serves every device of the node."""
    with Daemon(work, fake.with_profile(profile), env=fake.env) as d:
        d.wait_metric("accel_devices", fake.devices, timeout=90, vendor=fake.vendor)
        d.wait_metric("accel_exporter_source_up", 1, timeout=90, source=fake.source)
        return settled(d.metrics)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=",".join(NODES))
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--save", type=Path)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="series-") as tmp:
        for kind in args.nodes.split(","):
            with node(kind, Path(tmp) / kind) as fake:
                out[kind] = {"vendor": fake.vendor, "devices": fake.devices}
                for profile in args.profiles.split(","):
                    work = Path(tmp) / kind / profile
                    work.mkdir(parents=True, exist_ok=True)
                    text = scrape(work, fake, profile)
                    figures = measure(text)
                    figures["gzip_bytes"] = len(gzip.compress(text.encode(), 6))
                    out[kind][profile] = figures
                    if args.save is not None:
                        args.save.mkdir(parents=True, exist_ok=True)
                        (args.save / f"{kind}-{profile}.prom").write_text(text)
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
