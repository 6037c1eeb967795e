"""A real Prometheus server scrapes the daemon on loopback and loads the shipped rules.

The daemon runs with the shipped systemd config; Prometheus (Debian's
/usr/bin/prometheus) gets a free port, a temporary storage directory and a
one-second scrape and evaluation interval, and is stopped with its data.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.deploy import RULE_FILES, SYSTEMD, all_rules, need
from tests.helpers.wait import eventually

SCRAPE_JOB = "accel-exporter"


class Prometheus:
    """One Prometheus server process on loopback."""

    def __init__(self, tmp_path: Path, target: str) -> None:
        self.binary = need("prometheus", "apt-get install prometheus")
        self.dir = tmp_path / "prometheus"
        self.dir.mkdir()
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "900ms",
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(path) for path in RULE_FILES],
                    "scrape_configs": [
                        {"job_name": SCRAPE_JOB, "static_configs": [{"targets": [target]}]}
                    ],
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log = self.dir / "prometheus.log"

    def start(self, attempts: int = 3) -> Prometheus:
        for _ in range(attempts):
            self.port = free_port()
            with self.log.open("wb") as log:
                self.proc = subprocess.Popen(
                    [
                        self.binary,
                        f"--config.file={self.config}",
                        f"--storage.tsdb.path={self.dir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self.wait_ready():
                return self
            self.stop()  # the port was taken between choosing and binding it: try another
        raise AssertionError("prometheus did not become ready:\n" + self.log.read_text()[-3000:])

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """True once /-/ready answers 200; False when the server exits or the time is up."""

        def ready() -> str:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return "exited"
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return "ready" if resp.status == 200 else ""

        try:
            return eventually(ready, timeout=timeout, interval=0.2, ignore=(OSError,)) == "ready"
        except AssertionError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector"
        return data["result"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    return eventually(
        predicate,
        timeout=timeout,
        interval=0.25,
        what=what,
        ignore=(OSError, AssertionError, KeyError),
    )


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[[str], Prometheus]]:
    started: list[Prometheus] = []

    def make(target: str) -> Prometheus:
        server = Prometheus(tmp_path, target)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()
        shutil.rmtree(server.dir / "data", ignore_errors=True)


@pytest.mark.timeout(240)
def test_prometheus_scrapes_the_daemon_and_loads_the_rules(
    daemon_factory, prometheus_factory, tmp_path
):
    config = yaml.safe_load((SYSTEMD / "config.yaml").read_text())
    # The unit's StateDirectory, here the test's own: the host's stays untouched.
    assert config["health"]["state_dir"] == config["sources"]["amdsmi"]["state_dir"]
    config["health"]["state_dir"] = config["sources"]["amdsmi"]["state_dir"] = str(tmp_path)
    daemon = daemon_factory(config=config)
    host, port = daemon.address
    prom = prometheus_factory(f"{host}:{port}")

    up = wait_until(lambda: prom.query(f'up{{job="{SCRAPE_JOB}"}} == 1'), "up == 1")
    assert up[0]["metric"]["instance"] == f"{host}:{port}"

    memory = wait_until(lambda: prom.query("accel_host_memory_total_bytes"), "host memory")
    assert float(memory[0]["value"][1]) > 0
    assert memory[0]["metric"]["job"] == SCRAPE_JOB
    cpu = wait_until(lambda: prom.query("sum(accel_host_cpu_ratio)"), "host cpu")
    assert 0.5 < float(cpu[0]["value"][1]) < 1.5  # the modes of one interval add up to 1
    assert wait_until(
        lambda: prom.query('accel_exporter_source_up{source="host"} == 1'), "host source up"
    )

    # Every shipped rule group loads and evaluates without error.
    def rules_healthy() -> list[dict[str, Any]]:
        groups = prom.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        if len(rules) < len(all_rules()) or any(r["health"] != "ok" for r in rules):
            raise AssertionError(
                [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
            )
        return groups

    groups = wait_until(rules_healthy, "every rule evaluated with health ok")
    shipped = {g["name"] for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]}
    assert {g["name"] for g in groups} == shipped
    loaded = {r["name"] for g in groups for r in g["rules"]}
    assert loaded == {r.get("alert") or r["record"] for r in all_rules()}

    firing = prom.query('ALERTS{alertname="AccelExporterDown"}')
    assert firing == []

    # The alerts are live: stopping the daemon makes AccelExporterDown pending.
    daemon.stop()
    assert wait_until(lambda: prom.query(f'up{{job="{SCRAPE_JOB}"}} == 0'), "up == 0")
    pending = wait_until(
        lambda: [
            a
            for a in prom.api("alerts")["alerts"]
            if a["labels"]["alertname"] == "AccelExporterDown"
        ],
        "AccelExporterDown pending",
    )
    assert pending[0]["state"] == "pending"
    assert pending[0]["labels"]["severity"] == "warning"
