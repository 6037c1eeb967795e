"""Scrape latency of /metrics for a synthetic 5,000-series store vs a static body.

Three servers: ``store`` (data never changes: every scrape is a cache hit),
``churn`` (the data changes every 500 ms, as polls do, so the cache is rebuilt
continuously by the pre-render thread) and ``static`` (a fixed byte string).

Usage: ``python bench/scrape.py [--series 5000] [--requests 400]`` (prints JSON).

``--abuse`` measures instead scrape latency of the ``store`` server at 1 and 8
clients with and without 200 idle and 40 trickling connections held against
it (``tests/helpers/abuse.py``: each closed one reopened after a second), and
the ratio of the two (target: at most 1.5).

Both servers are the daemon's real HTTP server (``exporter.outputs.http``) in a
child process; one serves the store through the real exposition path, the
other a fixed byte string of the same size. The load generator runs in this
process with keep-alive connections at 1, 8 and 32 concurrent clients, so the
figures compare our exposition path against the cost of HTTP alone. It also
reports the idle RSS of the real daemon started with its defaults.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SERVER_CODE = r"""
import sys, time, signal
from exporter.config.web import WebConfig
from exporter.model import OK, Reading, Snapshot
from exporter.outputs.http import Endpoints, HttpServer
from exporter.outputs.prometheus import Exposition
from exporter.store import Store

mode, series = sys.argv[1], int(sys.argv[2])
store = Store()
readings = []
per_device = ["accel_power_watts", "accel_utilization_ratio", "accel_memory_used_bytes",
              "accel_memory_total_bytes", "accel_power_limit_watts"]
i = 0
while len(readings) < series:
    dev = str(i)
    for metric in per_device:
        readings.append(Reading(metric, (dev, f"GPU-{i:08d}"), float(i)))
    for clock in ("graphics", "sm", "memory", "video"):
        readings.append(Reading("accel_clock_hertz", (dev, f"GPU-{i:08d}", clock), 1.4e9))
    i += 1
readings = readings[:series]
def put(scale):
    now = time.monotonic()
    values = tuple(Reading(r.metric, r.labels, r.value * scale) for r in readings)
    store.put(Snapshot("synthetic", values, OK, time.time(), time.time(), now, 0.01, 1e9))


put(1.0)
expo = Exposition(store)
body, _ = expo.render(None, None)
if mode == "churn":
    # A poll lands every 500 ms, as with several sources on short intervals: every
    # change invalidates the cache, and the daemon's pre-render thread rebuilds it.
    def churn():
        i = 0
        while True:
            i += 1
            put(1.0 + i % 7)
            time.sleep(0.5)

    import threading
    threading.Thread(target=churn, daemon=True).start()
if mode != "static":
    # As in the daemon; idle while nothing changes (store mode, until the listener
    # publishes its counters under abuse).
    expo.start_prerender()


class Static(Exposition):
    def render(self, accept, accept_encoding, names=None):
        return body, {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}


chosen = Static(store) if mode == "static" else expo
# The listener's counters go to the store as in the daemon (under abuse they change
# all the time, and each publication invalidates the cached exposition).
server = HttpServer(WebConfig(listen_address="127.0.0.1:0", max_requests=64),
                    Endpoints(chosen, lambda: (True, []), lambda: {},
                              publish=lambda readings: store.publish("http", readings)))
server.start()
print(server.address[1], len(body), flush=True)
signal.sigwait([signal.SIGTERM])
server.stop()
"""


def start_server(mode: str, series: int) -> tuple[subprocess.Popen[str], int, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER_CODE, mode, str(series)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.stdout is not None
    port, size = proc.stdout.readline().split()
    return proc, int(port), int(size)


def load(port: int, clients: int, requests: int, failed: list[int] | None = None) -> list[float]:
    """Latencies of ``requests`` scrapes over ``clients`` keep-alive connections;
    the status of every answer that was not 200 goes to ``failed``."""
    latencies: list[float] = []
    lock = threading.Lock()
    per_client = max(1, requests // clients)

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        for _ in range(per_client):
            start = time.perf_counter()
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            resp.read()
            mine.append(time.perf_counter() - start)
            if resp.status != 200 and failed is not None:
                with lock:
                    failed.append(resp.status)
            if resp.will_close:
                conn.close()
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def idle_rss() -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_EXPORTER_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.level",
            "warning",
        ],
        env=env,
        cwd=REPO,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(15)
        rss_kb = 0
        pids = [proc.pid]
        for pid in pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss_kb += int(line.split()[1])
        return rss_kb / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def latency(lat: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(lat) * 1000, 3),
        "p99_ms": round(pct(lat, 0.99) * 1000, 3),
    }


ABUSER_CODE = r"""
import sys, json
from tests.helpers.abuse import Abuse
with Abuse("127.0.0.1", int(sys.argv[1]), idle=200, trickle=40, every=0.5) as attack:
    print("ready", flush=True)
    sys.stdin.read()  # until the benchmark closes it
print(json.dumps(attack.stats.__dict__), flush=True)
"""


def abuse(series: int, requests: int, rounds: int = 3) -> dict[str, object]:
    """Latency quiet and under abuse, in alternating rounds so that background load on
    a shared machine falls on both alike; the abusers run in their own process, so
    their threads do not compete with the load generator for this one's GIL."""
    proc, port, size = start_server("store", series)
    result: dict[str, object] = {
        "series": series,
        "body_bytes": size,
        "requests_per_round": requests,
        "rounds": rounds,
    }
    try:
        for clients in (1, 8):
            load(port, clients, 32)
            quiet: list[float] = []
            abused: list[float] = []
            failed: list[int] = []
            stats: dict[str, int] = {}
            for _ in range(rounds):
                quiet += load(port, clients, requests, failed)
                attacker = subprocess.Popen(
                    [sys.executable, "-c", ABUSER_CODE, str(port)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=REPO,
                    env=dict(os.environ, PYTHONPATH=str(REPO)),
                )
                assert attacker.stdout is not None
                attacker.stdout.readline()
                # Past the listener's header deadline (5 s): the abusers have been
                # closed once and are reconnecting, the steady state of an attack.
                time.sleep(6.5)
                abused += load(port, clients, requests, failed)
                for key, count in json.loads(attacker.communicate("", timeout=30)[0]).items():
                    stats[key] = stats.get(key, 0) + count
            row: dict[str, object] = {"quiet": latency(quiet), "abused": latency(abused)}
            row["p50_ratio"] = round(statistics.median(abused) / statistics.median(quiet), 3)
            row["p99_ratio"] = round(pct(abused, 0.99) / pct(quiet, 0.99), 3)
            row["abuse"] = stats
            row["not_200"] = len(failed)
            result[f"clients_{clients}"] = row
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=640)
    parser.add_argument("--abuse", action="store_true")
    args = parser.parse_args()
    if args.abuse:
        print(json.dumps(abuse(args.series, args.requests), indent=2))
        return
    result: dict[str, object] = {"series": args.series, "requests_per_level": args.requests}
    servers = {mode: start_server(mode, args.series) for mode in ("store", "churn", "static")}
    try:
        result["body_bytes"] = servers["store"][2]
        levels = {}
        for clients in (1, 8, 32):
            row = {}
            for mode, (_, port, _) in servers.items():
                load(port, clients, 32)  # warm up connections and caches
                lat = load(port, clients, args.requests)
                row[mode] = {
                    "p50_ms": round(statistics.median(lat) * 1000, 3),
                    "p99_ms": round(pct(lat, 0.99) * 1000, 3),
                }
            for mode in ("store", "churn"):
                row[f"{mode}_p50_ratio"] = round(row[mode]["p50_ms"] / row["static"]["p50_ms"], 3)
                row[f"{mode}_p99_ratio"] = round(row[mode]["p99_ms"] / row["static"]["p99_ms"], 3)
            levels[str(clients)] = row
        result["clients"] = levels
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    result["idle_daemon_rss_mb"] = round(idle_rss(), 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
