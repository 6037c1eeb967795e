"""The daemon's /metrics on a fake 16-GPU node against a plain Python server, printed as JSON.

Usage: ``python bench/scrape_daemon.py [--baseline /work/main] [--profile full]``

For this checkout (and ``--baseline``, another checkout of the project, e.g. the
main branch, measured side by side in the same run):

* ``scrape``: the real daemon of every checkout on one fake NVML node (tests/fakes/nvml,
  16 H100-class GPUs) is loaded by 1 and 8 keep-alive clients, alternating round by
  round with the other checkouts' and a plain ``http.server.ThreadingHTTPServer``
  (HTTP/1.1, no limits, no deadlines) serving the first daemon's body byte for byte,
  so all meet the same background load; p50 and p99 of each, the ratio of the p50s
  per round (target <= 1.2 at 8), the CPU each server's process spent per request
  (the daemon's includes its polls and renders meanwhile, not its workers'), which a
  loaded machine moves far less than latency, and the 1-minute load average.
* ``first_metrics_*``: process start to the first /metrics that has every GPU up,
  and the latency of the first /metrics request of a daemon that is ready and has
  rendered nothing yet (the cold render; target <= 0.3 s), over a few starts.
* ``idle``: CPU of the daemon's process tree and its main RSS over ``--window``
  seconds while scraped every 5 s, every checkout's daemon running at once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrape import load  # noqa: E402  (bench/scrape.py's keep-alive load generator)

from tests.fakes.nvml.control import FakeNvml, build  # noqa: E402
from tests.helpers.daemon import samples, value  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")

PLAIN_SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

body = open(sys.argv[1], "rb").read()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def start_daemon(
    checkout: Path, work: Path, env: dict[str, str], profile: str | None
) -> tuple[subprocess.Popen[bytes], str]:
    config: dict[str, Any] = {"sources": {"host": {"interval": "1s"}}}
    if profile and (checkout / "exporter" / "catalog" / "profiles.py").exists():
        config["outputs"] = {"prometheus": {"profile": profile}}
    path = work / f"config-{checkout.name}.json"
    path.write_text(json.dumps(config))
    port_file = work / f"port-{checkout.name}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_EXPORTER_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--config.file",
            str(path),
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.format",
            "json",
        ],
        cwd=checkout,
        env={**clean, **env, "PYTHONPATH": str(checkout)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        event = json.loads(line) if line.startswith(b"{") else {}
        if event.get("event") == "listening":
            port_file.write_text(event["url"])
            break
    else:
        raise RuntimeError(f"the daemon of {checkout} exited: {proc.wait()}")
    # Keep draining its log so it never blocks on a full pipe.
    import threading

    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    return proc, port_file.read_text()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def complete(url: str, uuids: list[str]) -> bytes | None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            body: bytes = resp.read()
    except OSError:
        return None
    parsed = samples(body.decode())
    ok = all(
        value(parsed, "accel_device_up", device=str(i), uuid=u) == 1 for i, u in enumerate(uuids)
    )
    return body if ok else None


def first_metrics(
    checkout: Path, work: Path, env: dict[str, str], uuids: list[str], profile: str | None
) -> dict[str, float]:
    """Start to the first complete /metrics (polled every 5 ms), and, in a second start,
    the latency of the first /metrics request once /readyz is 200 and the first slow
    poll is in (nothing rendered before it: the cold render a first scrape pays)."""
    started = time.monotonic()
    proc, url = start_daemon(checkout, work, env, profile)
    try:
        while complete(url, uuids) is None:
            if time.monotonic() - started > 60:
                raise RuntimeError("no complete /metrics within 60 s")
            time.sleep(0.005)
        to_complete = time.monotonic() - started
    finally:
        stop(proc)
    proc, url = start_daemon(checkout, work, env, profile)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/readyz", timeout=10).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("not ready within 60 s") from None
                time.sleep(0.02)
        time.sleep(3.0)
        began = time.perf_counter()
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            body = resp.read()
        first = time.perf_counter() - began
        parsed = samples(body.decode())
        if any(
            value(parsed, "accel_device_up", device=str(i), uuid=u) != 1
            for i, u in enumerate(uuids)
        ):
            raise RuntimeError("the first /metrics after readiness was not complete")
        return {"start_to_complete": to_complete, "first_request": first}
    finally:
        stop(proc)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def scrape(
    checkouts: list[Path],
    work: Path,
    env: dict[str, str],
    uuids: list[str],
    args: argparse.Namespace,
) -> dict[Path, dict[str, Any]]:
    """Every checkout's daemon on the same fake node, and a plain server with the first's
    body, loaded in turn round by round (A, B, plain, A, B, plain...), so that all meet
    the same background load; each round's p50 ratio is to the plain server's of that round."""
    daemons = {c: start_daemon(c, work, env, args.profile) for c in checkouts}
    plain = None
    try:
        bodies = {}
        for _, url in daemons.values():
            deadline = time.monotonic() + 60
            while complete(url, uuids) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no complete /metrics within 60 s")
                time.sleep(0.05)
        time.sleep(3.0)  # past the first slow poll: the body keeps its size from here on
        for checkout, (_, url) in daemons.items():
            with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
                bodies[checkout] = resp.read()
        body_file = work / "body.prom"
        body_file.write_bytes(bodies[checkouts[0]])
        plain = subprocess.Popen(
            [sys.executable, "-c", PLAIN_SERVER, str(body_file)], stdout=subprocess.PIPE, text=True
        )
        assert plain.stdout is not None
        servers: dict[Path | str, tuple[int, int]] = {
            c: (proc.pid, int(url.rsplit(":", 1)[1])) for c, (proc, url) in daemons.items()
        }
        servers["plain"] = (plain.pid, int(plain.stdout.readline()))
        out: dict[Path, dict[str, Any]] = {c: {"body_bytes": len(bodies[c])} for c in checkouts}
        for clients in (1, 8):
            lat: dict[Path | str, list[float]] = {n: [] for n in servers}
            cpu: dict[Path | str, list[float]] = {n: [] for n in servers}
            p50: dict[Path | str, list[float]] = {n: [] for n in servers}
            for _, port in servers.values():
                load(port, clients, 64)  # connections and caches warm
            loads = []
            for _ in range(args.rounds):
                loads.append(round(os.getloadavg()[0], 1))
                for name, (pid, port) in servers.items():
                    before = process_cpu(pid)
                    got = load(port, clients, args.requests)
                    cpu[name].append(1000 * (process_cpu(pid) - before) / len(got))
                    lat[name] += got
                    p50[name].append(statistics.median(got))
            for checkout in checkouts:
                ratios = [round(a / b, 3) for a, b in zip(p50[checkout], p50["plain"], strict=True)]
                out[checkout][f"clients_{clients}"] = {
                    **{
                        f"{n}_p50_ms": p(lat[k], 0.5)
                        for n, k in (("daemon", checkout), ("plain", "plain"))
                    },
                    **{
                        f"{n}_p99_ms": p(lat[k], 0.99)
                        for n, k in (("daemon", checkout), ("plain", "plain"))
                    },
                    **{
                        f"{n}_cpu_ms_per_request": round(statistics.median(cpu[k]), 3)
                        for n, k in (("daemon", checkout), ("plain", "plain"))
                    },
                    "p50_ratio_per_round": ratios,
                    "p50_ratio_median": statistics.median(ratios),
                    "load_average_1m": loads,
                }
        return out
    finally:
        if plain is not None:
            stop(plain)  # type: ignore[arg-type]
        for proc, _ in daemons.values():
            stop(proc)


def process_cpu(pid: int) -> float:
    """CPU seconds of one process, every thread (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu(pid: int) -> float:
    total = 0.0
    pids = [pid]
    for child in Path(f"/proc/{pid}/task").iterdir():
        kids = Path(f"/proc/{pid}/task/{child.name}/children")
        if kids.exists():
            pids += [int(x) for x in kids.read_text().split()]
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK
    return total


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def idle(
    checkouts: list[Path], work: Path, env: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    running = {c: start_daemon(c, work, env, args.profile) for c in checkouts}
    try:
        time.sleep(8.0)  # start-up and the first slow poll
        cpu0 = {c: tree_cpu(proc.pid) for c, (proc, _) in running.items()}
        began = next_at = time.monotonic()
        while time.monotonic() - began < args.window:
            for _, url in running.values():
                with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
                    resp.read()
            next_at += 5.0
            time.sleep(max(0.0, next_at - time.monotonic()))
        elapsed = time.monotonic() - began
        return {
            str(c): {
                "cpu_percent": round(100 * (tree_cpu(proc.pid) - cpu0[c]) / elapsed, 2),
                "main_rss_mib": rss_mib(proc.pid),
            }
            for c, (proc, _) in running.items()
        }
    finally:
        for proc, _ in running.values():
            stop(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout, measured side by side")
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--profile", default="full", help="this checkout's profile")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--skip", default="", help="comma-separated: scrape,first,idle")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    checkouts = [ROOT] + ([args.baseline.resolve()] if args.baseline else [])
    result: dict[str, Any] = {"devices": args.devices, "profile": args.profile}
    with tempfile.TemporaryDirectory(prefix="scrape-daemon-") as tmp:
        work = Path(tmp)
        fake = FakeNvml.create(build(work / "lib"), work / "state", args.devices)
        env = fake.env()
        uuids = [fake.uuid(i) for i in range(args.devices)]
        scraped = scrape(checkouts, work, env, uuids, args) if "scrape" not in skip else {}
        for checkout in checkouts:
            result[str(checkout)] = {"scrape": scraped[checkout]} if checkout in scraped else {}
        if "first" not in skip:
            runs: dict[Path, list[dict[str, float]]] = {c: [] for c in checkouts}
            for _ in range(args.starts):  # alternated, so both meet the same load
                for checkout in checkouts:
                    runs[checkout].append(first_metrics(checkout, work, env, uuids, args.profile))
            for checkout, got in runs.items():
                for key in ("start_to_complete", "first_request"):
                    seconds = [g[key] for g in got]
                    result[str(checkout)][f"first_metrics_{key}_seconds"] = {
                        "median": round(statistics.median(seconds), 3),
                        "runs": [round(x, 3) for x in seconds],
                    }
        if "idle" not in skip:
            for checkout, figures in idle(checkouts, work, env, args).items():
                result[checkout]["idle"] = figures
        fake.close()
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
