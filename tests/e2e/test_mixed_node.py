"""Nodes with several vendors: every fake library at once, one coherent /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.amdsmi import expected
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.fakes.hlml import control as hl
from tests.fakes.hlml.control import FakeHlml
from tests.fakes.levelzero import control as ze
from tests.fakes.levelzero.control import FakeZe
from tests.helpers.daemon import samples, value
from tests.helpers.promtool import check_metrics


def test_nvidia_and_amd_on_one_node(
    daemon_factory: Any, fake_nvml: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    nv = fake_nvml(2)
    config = {
        "sources": {
            "host": {"enabled": False},
            "nvml": {"interval": "1s", "slow_interval": "1s"},
            "amdsmi": {"interval": "1s", "slow_interval": "1s"},
        }
    }
    d = daemon_factory(config=config, env={**nv.env(), **amdsmi_env})
    d.wait_metric("accel_devices", 2, vendor="nvidia")
    d.wait_metric("accel_devices", 8, vendor="amd")
    for i in range(2):
        d.wait_metric("accel_device_up", 1, device=str(i), uuid=nv.uuid(i))
    for i in range(8):
        d.wait_metric(
            "accel_device_up", 1, device=str(i), uuid=expected.uuid(amdsmi_fake.device(i))
        )
    text = d.metrics()
    got = samples(text)
    infos = [dict(k[1]) for k in got if k[0] == "accel_device_info"]
    assert sorted(i["vendor"] for i in infos) == ["amd"] * 8 + ["nvidia"] * 2
    assert len({i["uuid"] for i in infos}) == 10  # device indices repeat per vendor, uuids never
    for source in ("nvml", "amdsmi"):
        assert value(got, "accel_exporter_source_up", source=source) == 1
    util = [k for k in got if k[0] == "accel_utilization_ratio"]
    assert len(util) == 10
    check_metrics(text)


def test_nvidia_amd_intel_and_gaudi_on_one_node(
    daemon_factory: Any,
    fake_nvml: Any,
    amdsmi_env: dict[str, str],
    amdsmi_fake: FakeAmdSmi,
    ze_lib: Path,
    ze_fake: FakeZe,
    hlml_lib: Path,
    hlml_fake: FakeHlml,
) -> None:
    nv = fake_nvml(2)
    timing = {"interval": "1s", "slow_interval": "1s", "bootstrap_timeout": "30s"}
    config = {
        "sources": {
            "host": {"enabled": False},
            "nvml": timing,
            "amdsmi": timing,
            "levelzero": {**timing, "library_path": str(ze_lib)},
            "hlml": {**timing, "library_path": str(hlml_lib)},
        }
    }
    env = {**nv.env(), **amdsmi_env, **ze_fake.env, **hlml_fake.env}
    d = daemon_factory(config=config, env=env)
    for vendor, count in (("nvidia", 2), ("amd", 8), ("intel", 4), ("intel_gaudi", 8)):
        d.wait_metric("accel_devices", count, vendor=vendor, timeout=60)
    # Intel utilization is a rate: it needs a second poll.
    d.wait_metric("accel_utilization_ratio", device="3", uuid=ze.uuid(3), timeout=30)
    for i in range(8):
        d.wait_metric("accel_device_up", 1, device=str(i), uuid=hl.uuid(i))
    text = d.metrics()
    got = samples(text)
    infos = [dict(k[1]) for k in got if k[0] == "accel_device_info"]
    vendors = sorted(i["vendor"] for i in infos)
    assert vendors == ["amd"] * 8 + ["intel"] * 4 + ["intel_gaudi"] * 8 + ["nvidia"] * 2
    assert len({i["uuid"] for i in infos}) == 22
    for source in ("nvml", "amdsmi", "levelzero", "hlml"):
        assert value(got, "accel_exporter_source_up", source=source) == 1
    assert len([k for k in got if k[0] == "accel_utilization_ratio"]) == 22
    check_metrics(text)
