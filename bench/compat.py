"""What outputs.prometheus.compat and workload_labels add to /metrics on an 8-GPU node.

The real daemon runs on a fake 8-GPU node (8 H100 through the fake libnvidia-ml with
GPM values, or 8 MI300X in SPX through the fake libamd_smi), once per option, and
one /metrics body (text format, as Prometheus 2 asks without OpenMetrics) is counted:
series (sample lines) and bytes, plain and gzipped, with the option off and on. With
compat on, the compat families are told apart by name (DCGM_*, gpu_*/pcie_*); our own
series are compared by name and labels between the two runs.

workload_labels adds labels, not series: the figure is the bytes its (empty, here
unattributed) labels add, and how many series of one device are replaced when the pod
on that device changes (the churn it costs).

``python bench/compat.py profiles [--compat dcgm@4.8,dcgm@4.10 ...]``: per profile
(minimal, default, full) and per compat list (default: off, ``dcgm``, ``dcgm,amd``; each
``--compat`` replaces them, comma-separated, ``off`` for none), on the 8-GPU fake NVML
with GPM: the samples of one settled /metrics body, ``accel_exporter_series`` summed
(equal with compat on), the p50/p99 latency of 20 scrapes of the running daemon (0.3 s
apart, so the pre-render serves most of them), and the render time of the body in this
process (a fresh exposition over one poll of the same fake each time, median of 15: no
GPM rates in one poll, so 40 DCGM_FI_PROF_* series fewer than the daemon's body).

Usage: ``python bench/compat.py`` (prints JSON; run by hand, not by CI).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.amdsmi import build as amd_build  # noqa: E402
from tests.fakes.amdsmi import state as amd_state  # noqa: E402
from tests.fakes.nvml.control import GPM_KNOWN, FakeNvml  # noqa: E402
from tests.fakes.nvml.control import build as nvml_build  # noqa: E402
from tests.helpers.daemon import Daemon  # noqa: E402

SETTLE_SECONDS = 6.0  # several fast polls and two slow ones (GPM needs two samples)
QUIET = {n: {"enabled": False} for n in ("host", "ccl_ras", "ccl_inspector", "cuda_checkpoint")}
COMPAT = re.compile(r"^(DCGM_|gpu_|pcie_)")


def _body(workdir: Path, config: dict[str, Any], env: dict[str, str]) -> str:
    """A body once the series have settled: the same count three seconds apart."""
    daemon = Daemon(workdir, config, env=env)
    daemon.start()
    try:
        time.sleep(SETTLE_SECONDS)
        previous, deadline = -1, time.monotonic() + 90
        while time.monotonic() < deadline:
            with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
                body = str(resp.read().decode())
            count = len(_series(body))
            if count == previous and "accel_devices{" in body:
                return body
            previous = count
            time.sleep(3.0)
        raise RuntimeError("the series did not settle within 90 s")
    finally:
        daemon.stop()


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _name(line: str) -> str:
    return line.split(" ", 3)[2] if line.startswith("# ") else re.split(r"[{ ]", line)[0]


def _own(text: str) -> str:
    """The body without the compat families (and without the process families, which vary)."""
    lines = text.splitlines(keepends=True)
    return "".join(x for x in lines if not COMPAT.match(_name(x)) and "process_" not in _name(x))


def _compat(text: str) -> str:
    return "".join(x for x in text.splitlines(keepends=True) if COMPAT.match(_name(x)))


def _figures(off: str, on: str) -> dict[str, Any]:
    own_off, own_on = _series(_own(off)), _series(_own(on))
    added = [line for line in _series(on) if COMPAT.match(line)]
    return {
        "series_off": len(_series(_own(off))),
        "series_added": len(added),
        "bytes_off": len(_own(off).encode()),
        "bytes_added": len(_compat(on).encode()),
        "gzip_bytes_off": len(gzip.compress(_own(off).encode(), 6)),
        "gzip_bytes_added": len(gzip.compress((_own(on) + _compat(on)).encode(), 6))
        - len(gzip.compress(_own(on).encode(), 6)),
        "families_added": len({re.split(r"[{ ]", line)[0] for line in added}),
        # Our own series present in one run only (an event or error counter may come and go
        # between two daemon runs; the byte-for-byte check is tests/unit/test_compat.py).
        "own_series_differing": len(
            {_names_only(x) for x in own_off} ^ {_names_only(x) for x in own_on}
        ),
    }


def _names_only(line: str) -> str:
    return line.rsplit(" ", 1)[0]


def _stamp_figures(off: str, on: str) -> dict[str, Any]:
    per_device = [line for line in _series(on) if 'pod=""' in line and 'device="0"' in line]
    return {
        "series_added": len(_series(on)) - len(_series(off)),
        "bytes_added": len(_own(on).encode()) - len(_own(off).encode()),
        "series_with_workload_labels": sum('pod="' in line for line in _series(on)),
        "series_replaced_per_pod_change_on_one_device": len(per_device),
    }


PROFILES = ("minimal", "default", "full")
DEFAULT_LISTS = ("off", "dcgm", "dcgm,amd")


def _scrape_latency(url: str, count: int = 20) -> dict[str, float]:
    took = []
    for _ in range(count):
        started = time.perf_counter()
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            resp.read()
        took.append(time.perf_counter() - started)
        time.sleep(0.3)
    took.sort()
    return {
        "scrape_p50_ms": round(statistics.median(took) * 1000, 2),
        "scrape_p99_ms": round(took[int(0.99 * (len(took) - 1))] * 1000, 2),
    }


def _render_ms(prometheus: dict[str, Any], nvml: dict[str, Any], env: dict[str, str]) -> float:
    """Median cold render of one poll's store in this process (the once path)."""
    from exporter.commands.once import poll_all
    from exporter.config import load_config
    from exporter.outputs.prometheus_setup import exposition_for
    from exporter.sources.registry import build_sources, catalog_for
    from exporter.store import Store

    os.environ.update(env)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        json.dump({**nvml, "outputs": {"prometheus": prometheus}}, handle)
    config = load_config(handle.name, os.environ)
    store = Store(catalog=catalog_for(config))
    asyncio.run(poll_all(build_sources(config), store))
    took = []
    for _ in range(15):
        started = time.perf_counter()
        exposition_for(store, config, process_metrics=False).render(None, None)
        took.append(time.perf_counter() - started)
    os.unlink(handle.name)
    return round(statistics.median(took) * 1000, 2)


def _sum_series(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("accel_exporter_series{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _eight_gpus(work: Path) -> tuple[FakeNvml, dict[str, Any], dict[str, str]]:
    """The 8-GPU fake NVML (GPM fields set), its source config and its environment."""
    lib = nvml_build(work / "nvml")
    nv = FakeNvml.create(lib, work / "nvml-state.bin", 8)
    for gpu in range(8):
        nv.set_gpm(gpu, {m: 10.0 + gpu + m % 50 for m in GPM_KNOWN})
    nvml = {"sources": {**QUIET, "amdsmi": {"enabled": False}, "nvml": {"interval": "1s"}}}
    return nv, nvml, nv.env()


def profiles(lists: list[str]) -> int:
    """Print samples, self-count and scrape/render time per profile and compat list."""
    from exporter import log

    log.configure("warning")  # the in-process polls' log lines go to stderr, not the JSON
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-compat-") as tmp:
        work = Path(tmp)
        nv, nvml, env = _eight_gpus(work)
        for profile in PROFILES:
            for listed in lists:
                compat = [] if listed == "off" else listed.split(",")
                prometheus = {"profile": profile, "compat": compat}
                daemon = Daemon(work, {**nvml, "outputs": {"prometheus": prometheus}}, env=env)
                daemon.start()
                try:
                    time.sleep(SETTLE_SECONDS)
                    text, previous = "", -1
                    for _ in range(30):
                        with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as r:
                            text = r.read().decode()
                        if len(_series(text)) == previous and "accel_devices{" in text:
                            break
                        previous = len(_series(text))
                        time.sleep(3.0)
                    figures: dict[str, Any] = {
                        "samples": len(_series(text)),
                        "compat_samples": sum(1 for x in _series(text) if COMPAT.match(x)),
                        "accel_exporter_series_sum": _sum_series(text),
                        "bytes": len(text.encode()),
                        **_scrape_latency(daemon.url),
                    }
                finally:
                    daemon.stop()
                figures["render_ms_one_poll"] = _render_ms(prometheus, nvml, env)
                out[f"{profile} compat={listed}"] = figures
        nv.close()
    print(json.dumps(out, indent=2))
    return 0


def main() -> int:
    """Print the figures as JSON."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-compat-") as tmp:
        work = Path(tmp)
        nv, nvml, env = _eight_gpus(work)
        base = _body(work, nvml, env)
        dcgm = _body(work, {**nvml, "outputs": {"prometheus": {"compat": ["dcgm"]}}}, env)
        stamped = _body(work, {**nvml, "outputs": {"prometheus": {"workload_labels": True}}}, env)
        out["nvidia_8_gpus"] = {
            "compat_dcgm": _figures(base, dcgm),
            "workload_labels": _stamp_figures(base, stamped),
        }
        nv.close()

        root = amd_build.build(work / "amdsmi")
        with amd_state.opened(work / "amdsmi-state.bin", devices=8) as fake:
            env = {**amd_build.env_for(root, {}), **fake.env}
            amdsmi = {
                "sources": {**QUIET, "nvml": {"enabled": False}, "amdsmi": {"interval": "1s"}}
            }
            base = _body(work, amdsmi, env)
            amd = _body(work, {**amdsmi, "outputs": {"prometheus": {"compat": ["amd"]}}}, env)
            stamped = _body(
                work, {**amdsmi, "outputs": {"prometheus": {"workload_labels": True}}}, env
            )
            out["amd_8_gpus"] = {
                "compat_amd": _figures(base, amd),
                "workload_labels": _stamp_figures(base, stamped),
            }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", nargs="?", default="sizes", choices=("sizes", "profiles"))
    parser.add_argument("--compat", action="append", help="a compat list: dcgm,amd (or off)")
    args = parser.parse_args()
    if args.mode == "profiles":
        raise SystemExit(profiles(args.compat or list(DEFAULT_LISTS)))
    raise SystemExit(main())
