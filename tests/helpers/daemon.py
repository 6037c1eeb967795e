"""Start the real daemon as a subprocess on a free loopback port, talk to it, stop it.

The daemon is launched through ``tests/helpers/launch.py`` so that a test can
add sources of its own (a source that hangs, a worker backend that misbehaves)
without any test-only switch in the product's configuration.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.cli import WITHOUT_RICH
from tests.helpers.wait import eventually

REPO = Path(__file__).resolve().parents[2]
LAUNCH = Path(__file__).with_name("launch.py")

# The device sources whose default, enabled: auto, starts a worker process at once to
# look for the vendor's library (a fresh interpreter each: about 1 CPU-s per daemon,
# minutes over the suite on the 2-core CI machine). A daemon a test starts here runs without
# them unless its test names the source (in its config, environment or flags) or asks
# for them as they are by default: Daemon(..., library_probes=True).
LIBRARY_PROBES = ("nvml", "amdsmi")
# The fakes' environment names their source too: a process given a fake library is
# meant to find it.
FAKE_LIBRARY_ENV = {"nvml": "FAKE_NVML_STATE", "amdsmi": "FAKE_AMDSMI_STATE"}


def probes_off(
    config: Mapping[str, Any], args: Sequence[str], env: Mapping[str, str]
) -> dict[str, str]:
    """The environment that disables each of LIBRARY_PROBES that the test does not name."""
    out = {}
    for source in LIBRARY_PROBES:
        variable = f"ACCEL_EXPORTER_SOURCES__{source.upper()}__"
        named = (
            source in (config.get("sources") or {})
            or any(arg.startswith(f"--sources.{source}.") for arg in args)
            or any(key.startswith(variable) for key in env)
            or FAKE_LIBRARY_ENV[source] in env
        )
        if not named:
            out[variable + "ENABLED"] = "false"
    return out


# The fabric source is on by default and reads the host's /sys: a daemon a test starts
# runs without it unless the test names it (its own fake sysfs, tests/fakes/fabric_sysfs.py),
# so no test's series depend on the machine's PCI bus. The diag source, on by default too,
# reads a host directory: likewise (the diag tests name theirs).
HOST_SOURCES = ("fabric", "diag")


def host_sources_off(
    config: Mapping[str, Any], args: Sequence[str], env: Mapping[str, str]
) -> dict[str, str]:
    """The environment that disables each of HOST_SOURCES that the test does not name."""
    out = {}
    for source in HOST_SOURCES:
        variable = f"ACCEL_EXPORTER_SOURCES__{source.upper()}__"
        named = (
            source in (config.get("sources") or {})
            or any(arg.startswith(f"--sources.{source}.") for arg in args)
            or any(key.startswith(variable) for key in env)
        )
        if not named:
            out[variable + "ENABLED"] = "false"
    return out


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


def children_of(pid: int) -> set[int]:
    """Direct children of ``pid`` (from /proc/<pid>/task/*/children)."""
    out: set[int] = set()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # gone (also between a check and the listing: CI failed on that)
        return out
    for task in tasks:
        try:
            out.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def descendants_of(pid: int) -> set[int]:
    """Every descendant of ``pid``."""
    seen: set[int] = set()
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse an exposition into {(sample name, sorted labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text_or_samples: Any, name: str, **labels: str) -> float | None:
    """The value of one series, or None when absent."""
    parsed = samples(text_or_samples) if isinstance(text_or_samples, str) else text_or_samples
    return parsed.get((name, tuple(sorted(labels.items()))))


class Daemon:
    """One daemon process; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        tmp_path: Path,
        config: Mapping[str, Any] | None = None,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        extra_sources: str | None = None,
        listen: str = "127.0.0.1:0",
        scheme: str = "http",
        library_probes: bool = False,
    ) -> None:
        self.tmp_path = tmp_path
        self.config = dict(config or {})
        self.args = list(args)
        self.env = dict(env or {})
        # Under pytest only: a bench (bench/idle.py, ...) measures the daemon as it ships.
        if not library_probes and "PYTEST_CURRENT_TEST" in os.environ:
            self.env = {
                **probes_off(self.config, self.args, self.env),
                **host_sources_off(self.config, self.args, self.env),
                **self.env,
            }
        self.extra_sources = extra_sources
        self.listen = listen
        self.scheme = scheme
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.address: tuple[str, int] | None = None
        self._reader: threading.Thread | None = None
        self._seen_pids: set[int] = set()
        self.config_file = tmp_path / f"config-{id(self)}.yaml"

    # -- process -------------------------------------------------------------

    def command(self) -> list[str]:
        cmd = [sys.executable, str(LAUNCH)]
        if self.extra_sources:
            cmd += ["--extra-sources", self.extra_sources]
        cmd += ["--"]
        if self.config:
            self.config_file.write_text(yaml.safe_dump(self.config))
            cmd += ["--config.file", str(self.config_file)]
        cmd += ["--web.listen-address", self.listen, "--log.format", "json", *self.args]
        return cmd

    def start(self, wait: float = 20.0) -> Daemon:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_EXPORTER_")}
        path = [str(REPO), str(WITHOUT_RICH), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
        env.update(self.env)
        self.proc = subprocess.Popen(
            self.command(),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=str(REPO),
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

        def started() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                self._close_pipe()
                raise RuntimeError(
                    f"daemon exited with {self.proc.returncode}:\n" + "\n".join(self.lines[-30:])
                )
            return self.address is not None

        try:
            eventually(started, timeout=wait, interval=0.02, what="the daemon's address")
        except AssertionError:
            raise RuntimeError(
                "daemon did not report its address:\n" + "\n".join(self.lines[-30:])
            ) from None
        return self

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.events.append(event)
                if event.get("event") == "listening" and self.address is None:
                    host, _, port = str(event["address"]).rpartition(":")
                    self.address = (host, int(port))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def descendants(self) -> set[int]:
        """The daemon's descendants now; also remembered for ``leftover_children()``."""
        found = descendants_of(self.pid)
        self._seen_pids |= found
        return found

    def workers(self) -> set[int]:
        """PIDs of the worker processes (``python -m exporter.workers``) under the daemon."""
        out = set()
        for pid in self.descendants():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"-m\x00exporter.workers\x00" in cmdline:
                out.add(pid)
        return out

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> tuple[int, float]:
        """SIGTERM, wait; returns (exit status, seconds taken). Kills on timeout."""
        if self.proc is None or self.proc.poll() is not None:
            self._close_pipe()
            return (self.proc.returncode if self.proc else 0), 0.0
        self.descendants()
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        elapsed = time.monotonic() - started
        self._close_pipe()
        return code, elapsed

    def _close_pipe(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self.proc is not None and self.proc.stderr is not None and not self._reader_alive():
            self.proc.stderr.close()

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def leftover_children(self) -> set[int]:
        """Processes ever seen under the daemon that still exist (after stop)."""
        alive = set()
        for pid in self._seen_pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if state != "X":
                alive.add(pid)
        return alive

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        leftover = self.leftover_children()
        for pid in leftover:  # never leave processes behind, even when a test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    # -- HTTP ------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.address is not None
        host, port = self.address
        return f"{self.scheme}://{host}:{port}"

    def get(
        self,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float = 10.0,
        context: ssl.SSLContext | None = None,
    ) -> Response:
        req = urllib.request.Request(self.url + path, headers=dict(headers or {}))
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
                return Response(resp.status, dict(resp.headers), resp.read())
        except urllib.error.HTTPError as err:
            return Response(err.code, dict(err.headers), err.read())

    def metrics(self, **kwargs: Any) -> str:
        resp = self.get("/metrics", **kwargs)
        assert resp.status == 200, resp.text
        return resp.text

    def status(self) -> dict[str, Any]:
        return self.get("/status").json()  # type: ignore[no-any-return]

    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 20.0,
        interval: float = 0.1,
        what: str = "condition",
    ) -> Any:
        try:
            return eventually(
                predicate,
                timeout=timeout,
                interval=interval,
                what=what,
                ignore=(OSError, AssertionError, KeyError),
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; last log lines:\n" + "\n".join(self.lines[-20:])
            ) from None

    def wait_metric(
        self, name: str, expected: float | None = None, timeout: float = 20.0, **labels: str
    ) -> float:
        """Wait until a series exists (and equals ``expected`` when given); its value."""

        def check() -> tuple[float] | None:
            v = value(self.metrics(), name, **labels)
            if v is None or (expected is not None and v != expected):
                return None
            return (v,)

        found: tuple[float] = self.wait_for(check, timeout, what=f"{name}{labels} == {expected}")
        return found[0]
