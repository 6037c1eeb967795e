"""Compat everywhere the daemon speaks: ``once --format prom`` and OTLP carry what /metrics does.

The same fake node and the same config (compat of both peers, AMD's cluster_name,
workload_labels) for ``accel-exporter once`` and for the daemon: the compat series
of the one-shot text equal the daemon's /metrics; the OTLP push carries them under
the peers' names, labels and values.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.daemon import samples
from tests.helpers.nodes import node
from tests.helpers.otlp_compare import points
from tests.helpers.otlp_receiver import HttpReceiver
from tests.helpers.series import settled

WIDE = {"compat": ["dcgm", "amd"], "cluster_name": "prod-a", "workload_labels": True}
PEERS = ("DCGM_", "gpu_", "pcie_")


def compat_series(text: str) -> dict[Any, float]:
    return {k: v for k, v in samples(text).items() if k[0].startswith(PEERS)}


def ready(d: Any, fake: Any) -> None:
    d.wait_metric("accel_devices", fake.devices, timeout=90, vendor=fake.vendor)
    d.wait_metric("accel_exporter_source_up", 1, timeout=90, source=fake.source)


@pytest.mark.parametrize("kind", ["nvidia", "amd"])
def test_once_prints_the_compat_series_metrics_serves(
    kind: str, daemon_factory: Any, tmp_path: Path
) -> None:
    with node(kind, tmp_path / kind) as fake:
        config = fake.with_profile("default", **WIDE)
        path = tmp_path / "config.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        once = run_cli("once", "--format", "prom", "--config.file", str(path), env=fake.env)
        assert once.returncode == 0, once.stderr
        printed = compat_series(once.stdout)
        assert any(k[0].startswith("DCGM_" if kind == "nvidia" else "gpu_") for k in printed)
        d = daemon_factory(config=config, env=fake.env)
        ready(d, fake)
        served = compat_series(settled(d.metrics))
        # One poll has no rate: what needs two GPM samples (DCGM_FI_PROF_*) is the daemon's
        # alone, as our own accel_* rates are; every other series is the same, value too.
        extra = {k[0] for k in served.keys() - printed.keys()}
        assert extra <= {n for n in extra if n.startswith("DCGM_FI_PROF_")}, extra
        assert printed == {k: v for k, v in served.items() if k in printed}
        assert len(printed) > len(extra)
        if kind == "amd":
            assert all(dict(k[1]).get("cluster_name") == "prod-a" for k in printed)
        # The self-count of the one-shot text adds up too, compat included.
        got = samples(once.stdout)
        counted = {
            dict(k[1])["source"]: v for k, v in got.items() if k[0] == "accel_exporter_series"
        }
        assert sum(counted.values()) == len(got)
        assert counted["compat_dcgm" if kind == "nvidia" else "compat_amd"] == len(printed)


@pytest.mark.parametrize("kind", ["nvidia", "amd"])
def test_otlp_pushes_the_compat_series_metrics_serves(
    kind: str, daemon_factory: Any, tmp_path: Path
) -> None:
    receiver = HttpReceiver()
    try:
        with node(kind, tmp_path / kind) as fake:
            config = fake.with_profile("default", **WIDE)
            config["outputs"]["otlp"] = {
                "enabled": True,
                "endpoint": receiver.endpoint,
                "protocol": "http/protobuf",
                "interval": "300ms",
            }
            d = daemon_factory(config=config, env=fake.env)
            ready(d, fake)
            served = compat_series(settled(d.metrics))
            since = time.time()
            receiver.wait(lambda r: sum(x.at > since for x in receiver.requests) >= 2)
            latest = max(receiver.requests, key=lambda r: r.at)
            values, shapes = points(latest.request)
        pushed = {k: v for k, v in values.items() if k[0].startswith(PEERS)}
        # The text parser names a counter's samples with _total; OTLP keeps the peer's name.
        as_served = {
            (
                name.removesuffix("_total") if name.startswith("DCGM_") else name,
                tuple(sorted(lb)),
            ): v
            for (name, lb), v in served.items()
        }
        assert pushed == as_served
        for name in {k[0] for k in pushed}:
            assert shapes[name][1] == ""  # no unit: the peers declare none
    finally:
        receiver.close()


def test_amd_config_json_on_the_daemon_and_a_broken_reload(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """AMD's own file selects the served fields; a reload with a broken file is rejected,
    naming file and line, and the last good set stays served."""
    fields = tmp_path / "amd-config.json"
    fields.write_text(json.dumps({"GPUConfig": {"Fields": ["GPU_USED_VRAM", "GPU_VOLTAGE"]}}))
    with node("amd", tmp_path / "amd") as fake:
        config = fake.with_profile("minimal", compat=["amd"], compat_fields={"amd": str(fields)})
        d = daemon_factory(config=config, env=fake.env)
        ready(d, fake)
        before = compat_series(settled(d.metrics))
        assert {k[0] for k in before} == {"gpu_used_vram"} and len(before) == fake.devices
        unserved = [e for e in d.events if e.get("event") == "compat field not served"]
        assert [(e["field"], e["peer"]) for e in unserved] == [("GPU_VOLTAGE", "amd")]
        fields.write_text('{\n  "GPUConfig": {\n    "Fields": [GPU_USED_VRAM]\n  }\n}\n')
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: any(e.get("event") == "reload rejected" for e in d.events),
            timeout=60,
            what="the reload rejected",
        )
        problem = next(e["problem"] for e in d.events if e.get("event") == "reload rejected")
        assert f"{fields}:3: malformed JSON" in problem
        assert compat_series(d.metrics()).keys() == before.keys()
