"""Poll-cycle cost of the device backends, printed as JSON. Run by hand, never by CI:

    .venv/bin/python bench/poll.py --backend nvml|amdsmi|levelzero|hlml|all \
        [--devices 8] [--polls 200]

Each backend has a module ``bench/_poll_<backend>.py`` (nvml: ``_poll_nvml.py``;
amdsmi: ``_poll_amdsmi.py``) that defines exactly this function::

    def run(devices: int, polls: int, workdir: pathlib.Path) -> dict[str, Any]

It builds its fake vendor library in ``workdir``, then measures and returns a
JSON-able dict with at least:

    "fast": {"cpu_seconds_per_poll", "bare_cpu_seconds_per_poll", "ratio",
             "encode_cpu_seconds_per_poll", "parse_cpu_seconds_per_poll",
             "cycle_cpu_seconds_per_poll", "cycle_ratio",
             "library_calls_per_poll", "readings_per_poll", "reply_bytes"}
        CPU seconds of one fast poll through the backend, of the same vendor calls
        made bare in a loop, and their quotient (target <= 1.5); of encoding the
        reply in the worker, of decoding and parsing it into readings in the daemon;
        of the whole cycle (poll + encode + decode and parse), and its quotient to
        the bare calls (goal: as close to 1.5 as it gets);
    "slow": the same for a poll that includes the slow fields;
    "gpm" (nvml): the same for the GPM calls alone (per GPU: divide by "devices");
    "first_complete_metrics_seconds": daemon start to the first /metrics with every
        device up (target <= 2 s).

``bench/_common.py`` has the shared pieces: ``compare()`` (CPU of backend, bare
calls, encode, parse and the whole cycle, interleaved rounds, minimum round; checks
both sides make the same library calls), ``reply_parser()`` (the daemon's parsing of
a reply) and ``first_complete_metrics()``. A module that is missing is reported as such
instead of failing the others.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("nvml", "amdsmi", "levelzero", "hlml")


def run_backend(name: str, devices: int, polls: int) -> dict[str, Any]:
    try:
        module = importlib.import_module(f"_poll_{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"_poll_{name}":
            return {"error": f"bench/_poll_{name}.py is not present"}
        raise
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        result: dict[str, Any] = module.run(devices=devices, polls=polls, workdir=Path(tmp))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=(*BACKENDS, "all"), default="nvml")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
    from exporter import log

    log.configure("warning", "console", sys.stderr)  # stdout carries the JSON only
    names = BACKENDS if args.backend == "all" else (args.backend,)
    report = {name: run_backend(name, args.devices, args.polls) for name in names}
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
