"""Fuzz targets: every parser of outside input, fed by Hypothesis, may raise only its own error.

Each target is a function of bytes plus the strategy that feeds it: arbitrary
bytes, and valid inputs (real captures, documented formats) mutated by byte
edits, splices and tokens that parsers trip on. ``run(target, inputs, seed)``
drives one target for ``inputs`` examples with a fixed Hypothesis seed and
returns what happened; the CI test (``tests/unit/test_fuzz.py``) runs a few
hundred per target, ``bench/fuzz.py`` a hundred thousand and more.

Targets: the RAS text and JSON report parsers, the Inspector line parser, the
diagnostic result files (``exporter.diag.formats.parse`` and the advice of each result), the
worker frame and reply parsers (``protocol.decode``, ``parse_inventory``,
the device source's reply check over ``parse_readings``), the config loader
(YAML file to validated config), and the HTTP request path (raw bytes to the
real listener, in-process, with basic auth on).
"""

from __future__ import annotations

import base64
import json
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from exporter.ccl.inspector import InspectorParseError, parse_record
from exporter.ccl.ras_model import RasParseError
from exporter.ccl.ras_parse import parse_json, parse_text
from exporter.config.devices import DeviceSourceConfig
from exporter.config.loader import load_config
from exporter.config.web import BasicAuthConfig, WebConfig
from exporter.diag import advice as diag_advice
from exporter.diag import formats as diag_formats
from exporter.diag.model import DiagError
from exporter.errors import ConfigError
from exporter.outputs.http import Endpoints, HttpServer
from exporter.outputs.prometheus import Exposition
from exporter.sources.device import DeviceSource, ShapeError, parse_inventory
from exporter.store import Store
from exporter.workers.protocol import ProtocolError, decode, encode
from tests.helpers.inspector_lines import coll_line, p2p_line
from tests.helpers.ras_reports import json_report, make_job, text_report

REPO = Path(__file__).resolve().parents[2]
RAS_FIXTURES = REPO / "tests" / "fixtures" / "rcclras"
DIAG_FIXTURES = REPO / "tests" / "fixtures" / "diag"

# Byte strings parsers tend to trip on, spliced in by the mutator.
TOKENS = (
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff\xfe",
    b"\xc3\x28",
    b"null",
    b"true",
    b"-1",
    b"0x",
    b"1e400",
    b"-0",
    b"NaN",
    b"Infinity",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"99999999999999999999999999",
    b"%",
    b"&",
    b"*a",
    b"!!python/object",
    b"<<: *a",
    b"---",
    b"~",
    b"\t",
    b" " * 64,
    b"HTTP/1.1",
    b"HTTP/9.9",
    b"Content-Length: 5\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Authorization: Basic \r\n",
)


@st.composite
def mutated(draw: st.DrawFn, seeds: tuple[bytes, ...]) -> bytes:
    """One seed with up to eight edits: replace, insert, delete, duplicate, splice, token."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.sampled_from(("byte", "insert", "delete", "dup", "splice", "token")))
        at = draw(st.integers(0, len(data)))
        if op == "byte" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 256))]
        elif op == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 256))]
        elif op == "splice":
            other = draw(st.sampled_from(seeds))
            start = draw(st.integers(0, len(other)))
            data[at:at] = other[start : start + draw(st.integers(1, 512))]
        else:
            data[at:at] = draw(st.sampled_from(TOKENS))
    return bytes(data)


def inputs_for(seeds: tuple[bytes, ...], max_size: int = 2048) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, or a mutated seed (most of the time: that is where parsers go deep)."""
    return st.one_of(st.binary(max_size=max_size), mutated(seeds), mutated(seeds))


@dataclass
class Target:
    """One parser under fuzzing: ``check(data)`` returns "accepted" or "rejected"."""

    name: str
    strategy: Callable[[], st.SearchStrategy[bytes]]
    check: Callable[[bytes], str]
    errors: tuple[type[BaseException], ...]
    # Context needed around the run (a listener), entered once per run.
    setup: Callable[[], Any] | None = None


# -- RAS ------------------------------------------------------------------------


def _ras_seeds() -> tuple[bytes, ...]:
    job = make_job(2, 4)
    job.set_fate("10.0.0.2", 10005, "missing")
    real = tuple(p.read_bytes() for p in sorted(RAS_FIXTURES.glob("*.txt")))
    made = (
        text_report(job).encode(),
        text_report(job, style="2.24").encode(),
        json_report(job).encode(),
        json_report(job, missing_comma_bug=True).encode(),
    )
    return real + made


def _ras(parser: Callable[[str], Any]) -> Callable[[bytes], str]:
    def check(data: bytes) -> str:
        try:
            parser(data.decode("utf-8", "replace"))
        except RasParseError:
            return "rejected"
        return "accepted"

    return check


# -- Inspector --------------------------------------------------------------------


def _inspector_seeds() -> tuple[bytes, ...]:
    return (
        coll_line(0xABCDEF0123, 0, "AllReduce", 1, 1 << 20, 100),
        coll_line(0x1, 3, "AllGather", 7, 4096, 12, n_ranks=4, comm_name="dp"),
        p2p_line(0xABCDEF0123, 1, "Send", 1, 0, 4096, 10),
        p2p_line(0x2, 0, "Recv", 2, 1, 1 << 30, 1000),
    )


def _inspector(data: bytes) -> str:
    try:
        record = parse_record(data)
    except InspectorParseError:
        return "rejected"
    return "accepted" if record is not None else "rejected"


# -- diagnostic result files ----------------------------------------------------------


def _diag_seeds() -> tuple[bytes, ...]:
    """The published samples of every suite (tests/fixtures/diag/README.md)."""
    return tuple(
        p.read_bytes() for p in sorted(DIAG_FIXTURES.iterdir()) if p.suffix in (".json", ".txt")
    )


def _diag(data: bytes) -> str:
    try:
        run = diag_formats.parse(data)
    except DiagError:
        return "rejected"
    for result in run.results:  # what the source does with each result next
        diag_advice.judge(run.suite, result)
    return "accepted"


# -- worker frames and replies ---------------------------------------------------------

_INVENTORY = {
    "vendor": "nvidia",
    "devices": [
        {"index": 0, "device": "0", "uuid": "GPU-a", "info": {"model": "H100", "serial": "1"}},
        {"index": 1, "device": "1", "uuid": "GPU-b", "info": {"model": "H100"}},
    ],
}
_REPLY = {
    "devices": [{"uuid": "GPU-a", "up": True}, {"uuid": "GPU-b", "up": False, "reason": "lost"}],
    "readings": {
        "accel_power_watts": [0, 312.5, 1, 80],
        "accel_clock_hertz": [0, "sm", 1.4e9, 1, "memory", 2.6e9],
        "accel_memory_used_bytes": [0, 1 << 34],
    },
    "slow_readings": {"accel_power_limit_watts": [0, 700.0]},
}


def _worker_seeds() -> tuple[bytes, ...]:
    frames = (
        {"type": "ready", "inventory": _INVENTORY},
        {"type": "result", "result": _REPLY},
        {"type": "result", "result": {"devices": [], "readings": {}}},
        {"type": "error", "kind": "unavailable", "reason": "library_not_found", "detail": "x"},
    )
    return tuple(encode(frame)[4:] for frame in frames)


def _device_source() -> DeviceSource:
    source = DeviceSource("fuzz", DeviceSourceConfig(), "unused:Backend")
    source._vendor, source._devices = parse_inventory(_INVENTORY)
    return source


def _worker(source: DeviceSource) -> Callable[[bytes], str]:
    def check(data: bytes) -> str:
        try:
            message = decode(data)
            if message["type"] == "ready":
                inventory = message.get("inventory")
                # The runner takes only an object for an inventory (runner.py).
                if isinstance(inventory, dict):
                    parse_inventory(inventory)
            elif message["type"] == "result":
                source._check_reply(message.get("result"), slow=True)
        except (ProtocolError, ShapeError):
            return "rejected"
        return "accepted"

    return check


# -- config ------------------------------------------------------------------------------


def _config_seeds() -> tuple[bytes, ...]:
    files = (
        REPO / "systemd" / "config.yaml",
        REPO / "deploy" / "kustomize" / "base" / "config.yaml",
    )
    own = (
        b"web:\n  listen_address: 127.0.0.1:9842\n  max_requests: 40\n  max_connections: 256\n"
        b"  header_timeout: 5s\n  basic_auth:\n    users:\n      prom: $2b$04$abcdefghijklmnopqrstuu\n"
        b"sources:\n  host:\n    interval: 5s\n  nvml:\n    enabled: auto\n    slow_interval: 60s\n"
        b"  ccl_ras:\n    addresses: ['127.0.0.1:28028']\n    stall_polls: 3\n"
        b"outputs:\n  otlp:\n    enabled: false\n    endpoint: http://127.0.0.1:4317\n"
        b"log:\n  level: info\n"
    )
    found = tuple(p.read_bytes() for p in files if p.exists())
    return (*found, own)


def _config(directory: Path) -> Callable[[bytes], str]:
    path = directory / "fuzz.yaml"

    def check(data: bytes) -> str:
        path.write_bytes(data)
        try:
            load_config(str(path), env={})
        except ConfigError:
            return "rejected"
        return "accepted"

    return check


# -- HTTP ---------------------------------------------------------------------------------

_GOOD = base64.b64encode(b"prom:s3cret")


def _http_seeds() -> tuple[bytes, ...]:
    auth = b"Authorization: Basic " + _GOOD + b"\r\n"
    return (
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n",
        b"GET /metrics?name[]=accel_exporter_build_info HTTP/1.1\r\nHost: x\r\n"
        + auth
        + b"Accept: application/openmetrics-text; version=1.0.0\r\n"
        b"Accept-Encoding: gzip\r\n\r\n",
        b"HEAD /status HTTP/1.0\r\n" + auth + b"\r\n",
        b"GET /metrics HTTP/1.1\r\n" + auth + b"Accept: application/openmetrics-text;"
        b" version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
        b"Accept-Encoding: deflate, gzip;q=0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
        b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
        b"GET / HTTP/1.1\r\nAuthorization: Basic bm9ib2R5Og==\r\n\r\n",
        b"GET /favicon.ico HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n",
    )


@contextmanager
def _listener() -> Iterator[HttpServer]:
    store = Store()
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = WebConfig(
        listen_address="127.0.0.1:0",
        basic_auth=BasicAuthConfig(users={"prom": hashed}),
        header_timeout=2.0,
        read_timeout=2.0,
    )
    server = HttpServer(
        config,
        Endpoints(
            Exposition(store, process_metrics=False),
            lambda: (True, []),
            lambda: {"fuzz": True},
            publish=lambda readings: store.publish("http", readings),
        ),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


class HttpFault(AssertionError):
    """The listener answered 500 (an exception escaped a handler) or garbage."""


def _http(server: HttpServer) -> Callable[[bytes], str]:
    address = server.address

    def check(data: bytes) -> str:
        # Generous: a loaded machine may starve the listener for seconds, and a
        # timeout here must mean a hang, not a busy neighbour.
        with socket.create_connection(address, timeout=60) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                got = b""
                while chunk := sock.recv(65536):
                    got += chunk
            except (ConnectionResetError, BrokenPipeError):
                # The server may close before reading everything (a 400 on the request line).
                return "rejected"
        if got and not got.startswith(b"HTTP/1."):
            raise HttpFault(f"not an HTTP answer: {got[:80]!r}")
        if b" 500 " in got.split(b"\r\n", 1)[0]:
            raise HttpFault(f"500 for {data[:200]!r}")
        status = got[9:12]
        return "accepted" if status in (b"200", b"204") else "rejected"

    return check


def targets(workdir: Path) -> dict[str, Callable[[], Iterator[Target]]]:
    """Each target by name, as a context (the HTTP one starts and stops a listener)."""

    @contextmanager
    def plain(target: Target) -> Iterator[Target]:
        yield target

    def http() -> Iterator[Target]:
        with _listener() as server:
            yield Target("http_request", lambda: inputs_for(_http_seeds(), 1024), _http(server), ())

    ras = _ras_seeds()
    return {
        "ras_text": lambda: plain(
            Target("ras_text", lambda: inputs_for(ras, 8192), _ras(parse_text), (RasParseError,))
        ),
        "ras_json": lambda: plain(
            Target("ras_json", lambda: inputs_for(ras, 8192), _ras(parse_json), (RasParseError,))
        ),
        "inspector_line": lambda: plain(
            Target(
                "inspector_line",
                lambda: inputs_for(_inspector_seeds()),
                _inspector,
                (InspectorParseError,),
            )
        ),
        "worker_reply": lambda: plain(
            Target(
                "worker_reply",
                lambda: inputs_for(_worker_seeds()),
                _worker(_device_source()),
                (ProtocolError, ShapeError),
            )
        ),
        "diag_file": lambda: plain(
            Target("diag_file", lambda: inputs_for(_diag_seeds(), 8192), _diag, (DiagError,))
        ),
        "config": lambda: plain(
            Target("config", lambda: inputs_for(_config_seeds()), _config(workdir), (ConfigError,))
        ),
        "http_request": contextmanager(http),
    }


@dataclass
class Result:
    """What one run did: the seed, how many inputs, how they ended, how long it took."""

    target: str
    seed: int
    inputs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def run(target: Target, inputs: int, seed_value: int) -> Result:
    """Drive ``target`` for ``inputs`` examples; any exception but its own errors propagates."""
    result = Result(target.name, seed_value)

    @seed(seed_value)
    @settings(
        max_examples=inputs,
        database=None,
        deadline=None,
        derandomize=False,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy())
    def fuzz(data: bytes) -> None:
        outcome = target.check(data)
        result.inputs += 1
        result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1

    started = time.monotonic()
    fuzz()
    result.seconds = round(time.monotonic() - started, 3)
    return result


def run_all(
    inputs: int,
    seed_value: int,
    only: tuple[str, ...] = (),
    inputs_of: dict[str, int] | None = None,
) -> list[Result]:
    """Run every target (or ``only`` these) in a scratch directory; the results."""
    results = []
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        for name, make in targets(Path(tmp)).items():
            if only and name not in only:
                continue
            with make() as target:
                count = (inputs_of or {}).get(name, inputs)
                results.append(run(target, count, seed_value))
    return results


def summary(results: list[Result]) -> list[dict[str, Any]]:
    """JSON-ready rows."""
    return [json.loads(json.dumps(r.__dict__)) for r in results]
