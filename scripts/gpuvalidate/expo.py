"""The daemon as the kit sees it: start it, scrape /metrics, read series, stop it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, keyed by (sample name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def find(samples: Samples, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return [
        (dict(key), value)
        for (sample, key), value in samples.items()
        if sample == name and want <= set(key)
    ]


def one(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` with ``labels``; None when absent.

    Two matches are an error: the kit asked for a series too loosely.
    """
    hits = find(samples, name, **labels)
    if len(hits) > 1:
        raise ValueError(f"{name}{labels} matches {len(hits)} series")
    return hits[0][1] if hits else None


def info(samples: Samples, name: str, **labels: str) -> dict[str, str] | None:
    """The labels of the one info sample of ``name`` with ``labels``; None when absent."""
    hits = find(samples, name, **labels)
    if len(hits) > 1:
        raise ValueError(f"{name}{labels} matches {len(hits)} series")
    return hits[0][0] if hits else None


@dataclass
class Scrape:
    """One /metrics read and the monotonic time it was answered."""

    samples: Samples
    at: float


@dataclass
class Daemon:
    """``python -m exporter`` with a config file, on a free loopback port."""

    python: str
    config: Path
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    address: str | None = None
    started_at: float = 0.0
    _reader: threading.Thread | None = None

    def start(self, wait: float = 60.0) -> Daemon:
        """Start it and wait for the ``listening`` log line (its address)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_EXPORTER_")}
        env.update(self.env)
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [
                self.python,
                "-m",
                "exporter",
                "--config.file",
                str(self.config),
                "--web.listen-address",
                "127.0.0.1:0",
                "--log.format",
                "json",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.config.parent,  # not the checkout: the installed project is imported
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + wait
        while self.address is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}; see {self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not listen within {wait:.0f} s; see {self.log}")
            time.sleep(0.02)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with self.log.open("ab") as out:
            for raw in self.proc.stderr:
                out.write(raw)
                out.flush()
                if self.address is None:
                    try:
                        event = json.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(event, dict) and event.get("event") == "listening":
                        self.address = str(event["address"])

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        assert self.proc is not None
        return self.proc.pid

    def get(self, path: str, timeout: float = 10.0) -> bytes:
        """The body of GET ``path``."""
        with urllib.request.urlopen(f"http://{self.address}{path}", timeout=timeout) as resp:
            body: bytes = resp.read()
            return body

    def scrape(self) -> Scrape:
        """/metrics, parsed."""
        text = self.get("/metrics").decode("utf-8", "replace")
        return Scrape(parse(text), time.monotonic())

    def status(self) -> Any:
        """/status as JSON."""
        return json.loads(self.get("/status"))

    def wait(self, ready: Any, timeout: float, every: float = 0.25) -> tuple[Scrape, bool]:
        """Scrape until ``ready(scrape)`` holds or ``timeout`` passes.

        Returns the last scrape and whether it was ready.
        """
        deadline = time.monotonic() + timeout
        while True:
            scrape = self.scrape()
            if ready(scrape):
                return scrape, True
            if time.monotonic() > deadline:
                return scrape, False
            time.sleep(every)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def family_tree(pid: int) -> list[int]:
    """``pid`` and every descendant (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(p) for p in (task / "children").read_text().split())
            except OSError:
                continue
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of ``pids`` (those that still exist)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` (VmRSS), None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
