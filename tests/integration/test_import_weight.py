"""Heavy modules load only where their source, output or command runs (issue 17).

The daemon is run for real (its CLI entry point, default sources, OTLP off) in a
subprocess on a node without Kubernetes (no kubelet socket, no service env) and
without any vendor library; once it is ready (every source polled once, however
that ended) the subprocess prints the names in its ``sys.modules``. Counting
modules, not time or memory: a module that comes back into the daemon's import
graph fails here with its name, whatever the machine's speed.

``rich`` is not listed: structlog imports it whenever it is installed (the dev
extra brings it through tpu-info), and a node's install does not have it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Packages only a source, output or config problem that is not here needs.
THIRD_PARTY = (
    "grpc",  # kubelet pod-resources (k8s), TPU runtime metrics (worker)
    "google.protobuf",
    "opentelemetry",  # the OTLP output
    "tpu_info",
    "pynvml",  # vendor bindings: loaded in the worker processes only
    "amdsmi",
    "cuda",
    "pyzes",
    "pyhlml",
    "jsonschema",
    "kubernetes",
    "pydantic",
    "bcrypt",  # web.basic_auth: not configured here
    "difflib",  # suggestions for a config key that does not exist
    "prometheus_client",  # only for an escaping scheme that rewrites names (dots, values)
    "urllib.request",  # prometheus_client's push gateway (the Kubernetes client never)
    "hashlib",
    "ssl",  # libssl and libcrypto: loaded once TLS is used (exporter/ssl_later.py)
    "_ssl",
    "rich",  # structlog's optional tracebacks: hidden while it loads (exporter/log.py)
    "better_exceptions",
)
# Our own modules that belong to commands or outputs the daemon is not running.
OURS = (
    "exporter.checks.command",  # accel-exporter check
    "exporter.checks.samples",
    "exporter.record.command",  # accel-exporter record
    "exporter.record.runner",
    "exporter.commands.once",
    "exporter.commands.probe",
    "exporter.commands.config_show",
    "exporter.outputs.otlp",
    "exporter.kube_wire",  # the Kubernetes client's transport (http.client): no API server here
    "exporter.outputs.kube_health",
    "exporter.outputs.prometheus_compat",
    "exporter.config.otlp",
    "exporter.outputs.otlp_batch",
    "exporter.backend_api.cper",  # AMD CPER ledgers: once an amdsmi worker answers
    "exporter.backends.amdsmi_ras",
    "exporter.backends.amdsmi_fields",
    "exporter.backend_api.tpu",  # the TPU worker's reply tables: no chip, no worker
    "exporter.backends.tpu",
    "exporter.backends.tpu_distributions",
    "exporter.host.neuron_report",  # neuron-monitor's report parser: not running here
    "exporter.ccl.ras_parse",  # RAS report parsers: no NCCL/RCCL job answers here
    "exporter.ccl.ras_json",
    "exporter.ccl.ras_text",
    "exporter.third_party.pod_resources",
    "exporter.third_party.tpu_metric_service",
)

DAEMON = textwrap.dedent(
    """
    import json, os, signal, socket, sys, threading, time

    from exporter.cli import main

    def report(port):
        # A bare socket: the harness must not load what is checked (http.client: ssl).
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
                    s.sendall(b"GET /readyz HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
                    if b" 200 " in s.recv(64).split(b"\\n")[0]:
                        break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            os._exit(3)
        accept = os.environ.get("ACCEL_TEST_ACCEPT")
        if accept:  # one scrape that asks for this format, its status and body reported
            with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as s:
                s.sendall(f"GET /metrics HTTP/1.0\\r\\nHost: x\\r\\nAccept: {accept}\\r\\n\\r\\n".encode())
                reply = b"".join(iter(lambda: s.recv(65536), b""))
            head, _, body = reply.partition(b"\\r\\n\\r\\n")
            print(json.dumps({"status": head.split(b" ")[1].decode(), "body": body.decode()}))
        print(json.dumps(sorted(sys.modules)), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    port = sys.argv[1]
    threading.Thread(target=report, args=(port,), daemon=True).start()
    sys.exit(main(["--web.listen-address", f"127.0.0.1:{port}", *sys.argv[2:]]))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCEL_EXPORTER_", "KUBERNETES_", "OTEL_"))
        and k not in ("LD_LIBRARY_PATH", "ROCM_PATH")
    }
    env["PYTHONPATH"] = str(REPO)
    env["HOME"] = str(tmp_path)
    return env


def _present(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_running_daemon_loads_no_module_of_what_does_not_run(tmp_path: Path) -> None:
    kubelet = tmp_path / "no-kubelet" / "kubelet.sock"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            DAEMON,
            str(_free_port()),
            "--log.format",
            "json",
            "--workload.k8s.socket",
            str(kubelet),
        ],
        env=_clean_env(tmp_path),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = json.loads(proc.stdout.strip().splitlines()[-1])
    # The entry point really ran the daemon: its runtime modules are there.
    assert {"exporter.app", "exporter.outputs.prometheus", "exporter.scheduler"} <= set(modules)
    assert _present(modules, THIRD_PARTY) == []
    assert _present(modules, OURS) == []


def test_device_worker_without_tpu_loads_no_grpc(tmp_path: Path) -> None:
    """A worker imports its backend's modules, not another backend's RPC stack."""
    script = textwrap.dedent(
        """
        import importlib, json, sys
        import exporter.workers.child
        for name in sys.argv[1:]:
            importlib.import_module(name)
        print(json.dumps(sorted(sys.modules)))
        """
    )
    backends = [
        "exporter.backends.nvml",
        "exporter.backends.amdsmi",
        "exporter.backends.levelzero",
        "exporter.backends.hlml",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", script, *backends],
        env=_clean_env(tmp_path),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = json.loads(proc.stdout)
    assert set(backends) <= set(modules)
    heavy = (
        "grpc",
        "google.protobuf",
        "opentelemetry",
        "tpu_info",
        "exporter.third_party.tpu_metric_service",
    )
    assert _present(modules, heavy) == []


def test_a_scrape_asking_for_dots_escaping_gets_the_library_encoder(tmp_path: Path) -> None:
    # That encoder is prometheus_client's, whose import needs urllib.request's HTTPS
    # handler: the daemon hid ssl at start (exporter/ssl_later.py) and must still answer.
    env = {**_clean_env(tmp_path), "ACCEL_TEST_ACCEPT": "text/plain; version=1.0.0; escaping=dots"}
    proc = subprocess.run(
        [sys.executable, "-c", DAEMON, str(_free_port()), "--log.format", "json"],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    scrape, modules = json.loads(lines[-2]), json.loads(lines[-1])
    assert scrape["status"] == "200", scrape["body"][:2000]
    assert "\naccel__exporter__build__info{" in scrape["body"]  # dots: "_" doubled
    assert "ssl" in modules and "prometheus_client" in modules  # paid once asked for
