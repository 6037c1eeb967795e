"""What a fleet of these nodes costs one real Prometheus, per profile, printed as JSON.

Usage: ``python bench/fleet.py [--nodes 100,500] [--profiles minimal,default,full]
[--duration 60] [--expositions DIR]``

For each profile, the daemon's real exposition of that profile on the fake 8-GPU
H100-class node (bench/series.py's, taken fresh unless ``--expositions`` holds
``nvidia-<profile>.prom``) is served by one small HTTP server as N targets, each
with its own ``instance`` label (``node-00001``...), and the Debian ``prometheus``
binary scrapes them every ``--scrape-interval`` with the shipped recording and
alert rules (deploy/prometheus/) evaluated on the same interval, for
``--duration`` seconds. Read from Prometheus itself at the end:

* ``head_series`` (``prometheus_tsdb_head_series``) and per node;
* ``rss_mib`` of the Prometheus process, and ``rss_kib_per_head_series`` over the
  baseline of an empty Prometheus (measured first);
* rule evaluation: the slowest group's last duration and the mean evaluation
  time per rule group (``prometheus_rule_group_last_duration_seconds``);
* ``scrape_duration_p50_seconds`` over the targets (``scrape_duration_seconds``).

Every served body is the same bytes (values do not move between scrapes), so chunk
compression is at its best: the figures are those of the index and head series,
which dominate a Prometheus' memory, not of sample churn. ``extrapolation`` scales
the per-series cost to 10,000 nodes split by ``hashmod`` into shards of at most
``--shard-series`` head series (2 M by default).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RULES = [
    ROOT / "deploy" / "prometheus" / "recording.yaml",
    ROOT / "deploy" / "prometheus" / "alerts.yaml",
]
FLEET_NODES = 10_000


class Bodies(ThreadingHTTPServer):
    """Serves ``/<profile>``: the same body to every target that scrapes it."""

    daemon_threads = True
    request_queue_size = 1024
    bodies: dict[str, bytes]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Bodies

    def do_GET(self) -> None:
        body = self.server.bodies.get(self.path.split("?")[0].strip("/"))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expositions(profiles: list[str], saved: Path | None) -> dict[str, bytes]:
    """The fake 8-GPU node's body per profile (from ``saved``, else bench/series.py now)."""
    if saved is None:
        saved = Path(tempfile.mkdtemp(prefix="fleet-bodies-"))
    missing = [p for p in profiles if not (saved / f"nvidia-{p}.prom").exists()]
    if missing:
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "series.py"),
                "--nodes",
                "nvidia",
                "--profiles",
                ",".join(missing),
                "--save",
                str(saved),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return {p: (saved / f"nvidia-{p}.prom").read_bytes() for p in profiles}


def config(port: int, profile: str, nodes: int, interval: int) -> str:
    groups = [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {"instance": f"node-{i:05d}", "node": f"node-{i:05d}"},
        }
        for i in range(nodes)
    ]
    doc = {
        "global": {"scrape_interval": f"{interval}s", "evaluation_interval": f"{interval}s"},
        "rule_files": [str(path) for path in RULES],
        "scrape_configs": [
            {"job_name": "accel-exporter", "metrics_path": f"/{profile}", "static_configs": groups},
        ],
    }
    return json.dumps(doc)  # JSON is YAML


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?query={urllib.parse.quote(promql)}", timeout=30
    ) as resp:
        return list(json.load(resp)["data"]["result"])


def scalar(url: str, promql: str) -> float:
    result = query(url, promql)
    return float(result[0]["value"][1]) if result else math.nan


def self_metrics(url: str) -> dict[str, list[float]]:
    """Prometheus' own metrics (it is not told to scrape itself): sample values by name."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample.value)
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def run_prometheus(
    work: Path, config_text: str, duration: float, interval: int
) -> dict[str, float]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "prometheus.yml").write_text(config_text)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("prometheus did not become ready") from None
                time.sleep(0.2)
        time.sleep(duration)
        own = self_metrics(url)
        groups = own.get("prometheus_rule_group_last_duration_seconds", [])
        out = {
            "rss_mib": rss_mib(proc.pid),
            "head_series": sum(own.get("prometheus_tsdb_head_series", [math.nan])),
            "head_chunks": sum(own.get("prometheus_tsdb_head_chunks", [math.nan])),
            "targets_up": scalar(url, 'sum(up{job="accel-exporter"})'),
            "scrape_duration_p50_seconds": scalar(
                url, 'quantile(0.5, scrape_duration_seconds{job="accel-exporter"})'
            ),
            "rule_groups": len(groups),
            "rule_group_last_duration_max_seconds": max(groups, default=math.nan),
            "rule_groups_last_duration_sum_seconds": sum(groups),
            "rule_evaluation_failures": sum(
                own.get("prometheus_rule_evaluation_failures_total", [])
            ),
            "cpu_seconds": sum(own.get("process_cpu_seconds_total", [math.nan])),
        }
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def extrapolate(per_node: float, kib_per_series: float, shard_series: int) -> dict[str, float]:
    series = per_node * FLEET_NODES
    shards = max(1, math.ceil(series / shard_series))
    return {
        "head_series": round(series),
        "hashmod_shards": shards,
        "head_series_per_shard": round(series / shards),
        "rss_gib_per_shard": round(series / shards * kib_per_series / 1024 / 1024, 1),
        "rss_gib_total": round(series * kib_per_series / 1024 / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,500")
    parser.add_argument("--profiles", default="minimal,default,full")
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--scrape-interval", type=int, default=15)
    parser.add_argument("--shard-series", type=int, default=2_000_000)
    parser.add_argument("--expositions", type=Path)
    args = parser.parse_args(argv)
    profiles = args.profiles.split(",")
    bodies = expositions(profiles, args.expositions)
    server = Bodies(("127.0.0.1", 0), Handler)
    server.bodies = bodies
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    result: dict[str, Any] = {
        "duration_seconds": args.duration,
        "scrape_interval_seconds": args.scrape_interval,
        "prometheus": subprocess.run(
            ["prometheus", "--version"], capture_output=True, text=True, check=False
        ).stdout.splitlines()[0],
        "node": "fake 8-GPU H100-class (18 NVLinks each), host source on",
    }
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
            empty = run_prometheus(
                Path(tmp) / "empty",
                config(port, profiles[0], 0, args.scrape_interval),
                10,
                args.scrape_interval,
            )
            result["empty_prometheus_rss_mib"] = round(empty["rss_mib"], 1)
            for profile in profiles:
                samples = sum(
                    1 for line in bodies[profile].splitlines() if line and not line.startswith(b"#")
                )
                row: dict[str, Any] = {
                    "samples_per_node": samples,
                    "bytes_per_node": len(bodies[profile]),
                }
                for n in map(int, args.nodes.split(",")):
                    got = run_prometheus(
                        Path(tmp) / f"{profile}-{n}",
                        config(port, profile, n, args.scrape_interval),
                        args.duration,
                        args.scrape_interval,
                    )
                    got["head_series_per_node"] = got["head_series"] / n
                    got["rss_kib_per_head_series"] = (
                        (got["rss_mib"] - empty["rss_mib"]) * 1024 / got["head_series"]
                    )
                    row[str(n)] = {
                        k: round(v, 4) if isinstance(v, float) else v for k, v in got.items()
                    }
                # From the largest run whose every target was scraped: a run where this
                # machine could not keep up (targets down) undercounts the series per node.
                complete = [row[n] for n in args.nodes.split(",") if row[n]["targets_up"] == int(n)]
                for n in args.nodes.split(","):
                    row[n]["complete"] = row[n]["targets_up"] == int(n)
                if not complete:
                    result[profile] = row
                    continue
                largest = complete[-1]
                row["extrapolation_10000_nodes"] = extrapolate(
                    largest["head_series_per_node"],
                    largest["rss_kib_per_head_series"],
                    args.shard_series,
                )
                result[profile] = row
    finally:
        server.shutdown()
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
