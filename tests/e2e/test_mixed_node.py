"""A node with NVIDIA and AMD GPUs: both fake libraries at once, one coherent /metrics."""

from __future__ import annotations

from typing import Any

from tests.fakes.amdsmi import expected
from tests.fakes.amdsmi.state import FakeAmdSmi
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
