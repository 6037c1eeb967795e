"""The daemon with TPU chips on a fake host and fake libtpu metric services (real gRPC).

The services are built from tpu-info's own generated proto and run in their
own processes; the daemon's worker talks to them with the exporter's client.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.fakes.tpu.control import V3, FakeService, devices, make_host, uuid
from tests.helpers.cli import cli_env
from tests.helpers.daemon import Daemon, samples, value
from tests.helpers.promtool import check_metrics

OFF = {"enabled": False}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    # The check subcommand runs in this process and configures logging for it.
    yield
    structlog.reset_defaults()


GiB = 1 << 30


def config(host: Path, addresses: list[str], **tpu: Any) -> dict[str, Any]:
    others = ("host", "nvml", "amdsmi", "neuron", "ccl_ras", "ccl_inspector")
    return {
        "sources": {
            **{name: OFF for name in others},
            "tpu": {
                "interval": "1s",
                "slow_interval": "1s",
                "timeout": "3s",
                "host_root": str(host),
                "addresses": addresses,
                **tpu,
            },
        }
    }


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Any]:
    """``service(scenario)`` -> a started FakeService, stopped at teardown."""
    made: list[FakeService] = []

    def make(**scenario: Any) -> FakeService:
        svc = FakeService(tmp_path / f"svc-{len(made)}", dict(scenario)).start()
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.stop()


def closed_port() -> str:
    """A loopback address nobody listens on (a workload that is not running)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def runtime(d: Daemon, address: str) -> dict[str, Any]:
    return next(r for r in d.status()["sources"]["tpu"]["runtimes"] if r["address"] == address)


def test_values_from_two_workloads(daemon_factory: Any, tmp_path: Path, service: Any) -> None:
    host = make_host(tmp_path / "host", 4)
    values = devices(4)
    first = service(devices={k: v for k, v in values.items() if int(k) < 2})
    # The newer libtpu names the device in a key-value list, as a string.
    second = service(
        devices={k: v for k, v in values.items() if int(k) >= 2}, device_attr="kvlist_string"
    )
    d = daemon_factory(config(host, [first.address, second.address]))
    d.wait_metric("accel_utilization_ratio", 0.175, device="3", uuid=uuid(3))
    got = samples(d.metrics())
    assert value(got, "accel_devices", vendor="google") == 4
    for chip in range(4):
        ident = {"device": str(chip), "uuid": uuid(chip)}
        assert value(got, "accel_device_up", **ident) == 1
        assert value(got, "accel_memory_total_bytes", **ident) == 16 * GiB
        assert value(got, "accel_memory_used_bytes", **ident) == (chip + 1) * GiB
        assert value(got, "accel_utilization_ratio", **ident) == (10.0 + chip * 2.5) / 100
        bandwidth = value(got, "accel_memory_bandwidth_utilization_ratio", **ident)
        assert bandwidth == (40.0 + chip * 5.0) / 100
    info = [dict(k[1]) for k in got if k[0] == "accel_device_info"]
    assert {(i["device"], i["model"], i["pci_bus_id"], i["vendor"]) for i in info} == {
        (str(c), "TPU v5e", uuid(c).removeprefix("tpu-"), "google") for c in range(4)
    }
    for svc in (first, second):
        assert value(got, "accel_tpu_runtime_attached", address=svc.address) == 1
    assert value(got, "accel_exporter_source_up", source="tpu") == 1
    check_metrics(d.metrics())


def test_idle_chips_are_counted_and_up(daemon_factory: Any, tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", 8)
    nobody = closed_port()
    d = daemon_factory(config(host, [nobody]))
    d.wait_metric("accel_devices", 8, vendor="google")
    d.wait_metric("accel_tpu_runtime_attached", 0, address=nobody)
    got = samples(d.metrics())
    assert value(got, "accel_exporter_source_up", source="tpu") == 1
    assert [k for k in got if k[0] == "accel_device_up" and got[k] == 1].__len__() == 8
    runtime_families = (
        "accel_utilization_ratio",
        "accel_memory_used_bytes",
        "accel_memory_total_bytes",
        "accel_memory_bandwidth_utilization_ratio",
    )
    assert not [k for k in got if k[0] in runtime_families]
    assert runtime(d, nobody) == {"address": nobody, "attached": False, "reason": "", "detail": ""}


def test_a_hung_service_costs_only_its_own_series(
    daemon_factory: Any, tmp_path: Path, service: Any
) -> None:
    host = make_host(tmp_path / "host", 2)
    values = devices(2)
    hung = service(devices={"0": values["0"]}, mode="hang")
    fine = service(devices={"1": values["1"]})
    d = daemon_factory(config(host, [hung.address, fine.address]))
    d.wait_metric("accel_memory_used_bytes", 2 * GiB, device="1", uuid=uuid(1))
    d.wait_for(lambda: runtime(d, hung.address)["reason"] == "timeout", what="the timeout")
    got = samples(d.metrics())
    assert value(got, "accel_memory_used_bytes", device="0", uuid=uuid(0)) is None
    assert value(got, "accel_device_up", device="0", uuid=uuid(0)) == 1
    assert value(got, "accel_tpu_runtime_attached", address=hung.address) == 0
    assert value(got, "accel_exporter_source_up", source="tpu") == 1
    # The deadline is the call's, not the worker's: no worker was killed for it.
    assert d.status()["sources"]["tpu"]["worker_restarts"] == 0
    hung.set(mode="normal")
    d.wait_metric("accel_memory_used_bytes", GiB, device="0", uuid=uuid(0))
    assert runtime(d, hung.address)["reason"] == ""
    # Served once, its chips are known: a metric it then fails to give is counted on
    # them (accel_field_errors_total{source="tpu"}); the others are still served.
    hung.set(failing={"tpu.runtime.hbm.memory.usage.bytes": "INTERNAL"})
    errors = {"source": "tpu", "reason": "internal"}
    chip0 = {"device": "0", "uuid": uuid(0)}
    d.wait_for(
        lambda: (value(d.metrics(), "accel_field_errors_total", **chip0, **errors) or 0) >= 1,
        what="the failed read counted",
    )
    got = samples(d.metrics())
    assert value(got, "accel_field_errors_total", device="1", uuid=uuid(1), **errors) is None
    assert value(got, "accel_memory_total_bytes", device="0", uuid=uuid(0)) == 16 * GiB
    assert value(got, "accel_memory_used_bytes", device="1", uuid=uuid(1)) == 2 * GiB


def test_unavailable_is_idle_until_a_workload_starts(
    daemon_factory: Any, tmp_path: Path, service: Any
) -> None:
    host = make_host(tmp_path / "host", 2)
    svc = service(devices=devices(2), mode="unavailable")
    d = daemon_factory(config(host, [svc.address]))
    d.wait_metric("accel_tpu_runtime_attached", 0, address=svc.address)
    got = samples(d.metrics())
    assert not [k for k in got if k[0] == "accel_utilization_ratio"]
    assert value(got, "accel_exporter_source_up", source="tpu") == 1
    assert runtime(d, svc.address)["reason"] == ""
    svc.set(mode="normal")
    d.wait_metric("accel_utilization_ratio", 0.125, device="1", uuid=uuid(1))
    d.wait_metric("accel_tpu_runtime_attached", 1, address=svc.address)


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"mode": "garbage"}, "deserializing"),
        ({"mode": "string_gauge"}, "as_string"),
        (
            {"devices": {"0": {"usage": 1, "total": 2, "duty": 5.0, "bw": 5.0}, "7": {"usage": 1}}},
            "device 7",
        ),
        ({"devices": {"0": {"total": 2, "usage": 1, "duty": 250.0, "bw": 5.0}}}, "250"),
    ],
)
def test_a_malformed_reply_is_a_reason_not_a_number(
    daemon_factory: Any, tmp_path: Path, service: Any, change: dict[str, Any], detail: str
) -> None:
    host = make_host(tmp_path / "host", 2)
    svc = service(devices=devices(2))
    d = daemon_factory(config(host, [svc.address]))
    d.wait_metric("accel_utilization_ratio", 0.1, device="0", uuid=uuid(0))
    svc.set(**change)
    found = d.wait_for(
        lambda: runtime(d, svc.address) if runtime(d, svc.address)["reason"] else None,
        what="the malformed reply's reason",
    )
    assert found["reason"] == "malformed_reply" and detail in found["detail"], found
    got = samples(d.metrics())
    assert value(got, "accel_exporter_source_up", source="tpu") == 1
    assert value(got, "accel_device_up", device="0", uuid=uuid(0)) == 1
    if change.get("mode") == "garbage":
        assert not [k for k in got if k[0] == "accel_utilization_ratio"]
    else:  # only the rejected metric is gone; nothing out of range is exported
        for k, v in got.items():
            if k[0].endswith("_ratio") and k[0].startswith("accel_"):
                assert 0 <= v <= 1, (k, v)


def test_v3_duty_cycle_per_chip_and_memory_of_both_cores(
    daemon_factory: Any, tmp_path: Path, service: Any
) -> None:
    host = make_host(tmp_path / "host", 2, device_id=V3[0], subsystem=V3[1])
    # Two runtime devices per v3 chip; duty cycle comes once per chip.
    svc = service(
        devices=devices(2, per_chip=2),
        duty_per_chip={"0": 30.0, "1": 60.0},
        device_attr="kvlist_int",
    )
    d = daemon_factory(config(host, [svc.address]))
    d.wait_metric("accel_utilization_ratio", 0.6, device="1", uuid=uuid(1))
    got = samples(d.metrics())
    assert value(got, "accel_utilization_ratio", device="0", uuid=uuid(0)) == 0.3
    # chip 1 = runtime devices 2 and 3: (3 + 4) GiB used, 2 x 16 GiB installed
    assert value(got, "accel_memory_used_bytes", device="1", uuid=uuid(1)) == 7 * GiB
    assert value(got, "accel_memory_total_bytes", device="1", uuid=uuid(1)) == 32 * GiB
    assert value(got, "accel_memory_bandwidth_utilization_ratio", device="1", uuid=uuid(1)) == (
        (50.0 + 55.0) / 2 / 100
    )
    info = [dict(k[1]) for k in got if k[0] == "accel_device_info"]
    assert {i["model"] for i in info} == {"TPU v3"}


# -- once, probe, check --------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_once_probe_and_gpu_count(
    daemon_factory: Any, tmp_path: Path, service: Any, capsys: Any
) -> None:
    host = make_host(tmp_path / "host", 4)
    svc = service(devices=devices(4))
    cfg = config(host, [svc.address])
    path = tmp_path / "once.json"
    path.write_text(json.dumps(cfg))
    once = cli("once", "--format", "json", "--config.file", str(path))
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)["tpu"]
    assert doc["ok"] is True
    readings = {(r["metric"], tuple(r["labels"].values())): r["value"] for r in doc["readings"]}
    assert readings[("accel_devices", ("google",))] == 4
    assert readings[("accel_memory_used_bytes", ("2", uuid(2)))] == 3 * GiB
    probe = cli("probe", "--config.file", str(path))
    line = next(x for x in probe.stdout.splitlines() if x.startswith("tpu"))
    assert line.split()[1:3] == ["auto", "ok"], probe.stdout
    # A node without chips: unavailable, without a worker.
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(config(tmp_path / "empty", [svc.address])))
    probe = cli("probe", "--config.file", str(bare))
    line = next(x for x in probe.stdout.splitlines() if x.startswith("tpu"))
    assert line.split()[1:3] == ["auto", "unavailable"] and "no TPU chip" in line

    from exporter.cli import main

    d = daemon_factory(cfg)
    d.wait_metric("accel_devices", 4, vendor="google")
    status = main(["check", "gpu-count", "--expected", "4", "--vendor", "google", "--url", d.url])
    out = capsys.readouterr().out
    assert status == 0 and "4 of 4" in out, out
    status = main(["check", "gpu-count", "--expected", "5", "--url", d.url])
    assert status == 2, capsys.readouterr().out


DCN = "megascale.dcn_transfer_latencies.microsecond.cumulative.distribution"
H2D = "megascale.host_to_device_transfer_latencies.microsecond.cumulative.distribution"


def test_latency_distributions_become_histograms(
    daemon_factory: Any, tmp_path: Path, service: Any
) -> None:
    host = make_host(tmp_path / "host", 1)
    # Exponential: underflow < 10us, then [10, 20), [20, 40), [40, 80), overflow >= 80 us.
    dcn = {
        "buffer_size": "8MiB",
        "exponential": [3, 2.0, 10.0],
        "counts": [1, 2, 3, 4, 5],
        "mean": 30.0,
    }
    # Explicit bounds 100us and 1000us: three buckets.
    h2d = {"buffer_size": "1MiB", "explicit": [100.0, 1000.0], "counts": [7, 0, 1], "mean": 200.0}
    svc = service(devices=devices(1), distributions={DCN: [dcn], H2D: [h2d]})
    d = daemon_factory(config(host, [svc.address]))
    labels = {"address": svc.address, "kind": "dcn_transfer", "buffer_size": "8MiB"}
    d.wait_metric("accel_tpu_transfer_latency_seconds_count", 15, **labels)
    got = samples(d.metrics())

    def bucket(le: str, **lab: str) -> float | None:
        return value(got, "accel_tpu_transfer_latency_seconds_bucket", le=le, **lab)

    # Service buckets end at 10, 20, 40, 80 us and +Inf; each lands in the first
    # fixed bucket at or above its end: 10us, 25us, 50us, 100us, +Inf.
    assert bucket("1e-05", **labels) == 1
    assert bucket("2.5e-05", **labels) == 3
    assert bucket("5e-05", **labels) == 6
    assert bucket("0.0001", **labels) == 10
    assert bucket("10.0", **labels) == 10
    assert bucket("+Inf", **labels) == 15
    total = value(got, "accel_tpu_transfer_latency_seconds_sum", **labels)
    assert total is not None and abs(total - 15 * 30e-6) < 1e-12
    h2d_labels = {"address": svc.address, "kind": "host_to_device_transfer", "buffer_size": "1MiB"}
    assert bucket("0.0001", **h2d_labels) == 7
    assert bucket("0.001", **h2d_labels) == 7
    assert bucket("+Inf", **h2d_labels) == 8
    check_metrics(d.metrics())
    # Counts that do not add up to the count: the distribution is refused, with the reason.
    svc.set(distributions={DCN: [{**dcn, "count": 99}]})
    found = d.wait_for(
        lambda: runtime(d, svc.address) if runtime(d, svc.address)["reason"] else None,
        what="the inconsistent distribution's reason",
    )
    assert found["reason"] == "malformed_reply" and "add up" in found["detail"], found
    got = samples(d.metrics())
    assert value(got, "accel_tpu_transfer_latency_seconds_count", **labels) is None
    assert value(got, "accel_utilization_ratio", device="0", uuid=uuid(0)) == 0.1
