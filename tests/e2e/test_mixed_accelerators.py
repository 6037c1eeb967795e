"""A node with NVIDIA GPUs, TPU chips and Neuron devices: one coherent /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.neuron import control as neuron
from tests.fakes.tpu import control as tpu
from tests.helpers.daemon import samples, value
from tests.helpers.promtool import check_metrics


def test_nvidia_tpu_and_neuron_on_one_node(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    nv = fake_nvml(2)
    tpu_host = tpu.make_host(tmp_path / "tpu-host", 4)
    service = tpu.FakeService(tmp_path / "svc", {"devices": tpu.devices(4)}).start()
    try:
        neuron_host = neuron.make_host(tmp_path / "neuron-host", 2)
        monitor = neuron.FakeMonitor(tmp_path / "neuron.json")
        monitor.set(
            devices=2,
            cores_per_device=2,
            runtimes=[{"tag": "infer", "util": {"1": 40.0}, "status": {"completed": 2}}],
        )
        config = {
            "sources": {
                "host": {"enabled": False},
                "amdsmi": {"enabled": False},
                "nvml": {"interval": "1s", "slow_interval": "1s"},
                "tpu": {
                    "interval": "1s",
                    "slow_interval": "1s",
                    "host_root": str(tpu_host),
                    "addresses": [service.address],
                },
                "neuron": {
                    "interval": "1s",
                    "host_root": str(neuron_host),
                    "command": monitor.command,
                },
            }
        }
        d = daemon_factory(config=config, env=nv.env())
        d.wait_metric("accel_devices", 2, vendor="nvidia")
        d.wait_metric("accel_utilization_ratio", 0.175, device="3", uuid=tpu.uuid(3))
        d.wait_metric(
            "accel_neuroncore_utilization_ratio", 0.4, device="0", uuid=neuron.serial(0), core="1"
        )
        text = d.metrics()
        got = samples(text)
        assert value(got, "accel_devices", vendor="google") == 4
        assert value(got, "accel_devices", vendor="aws") == 2
        infos = [dict(k[1]) for k in got if k[0] == "accel_device_info"]
        assert sorted(i["vendor"] for i in infos) == ["aws"] * 2 + ["google"] * 4 + ["nvidia"] * 2
        assert len({i["uuid"] for i in infos}) == 8  # indices repeat per vendor, uuids never
        ups = [k for k in got if k[0] == "accel_device_up" and got[k] == 1]
        assert len(ups) == 8
        for source in ("nvml", "tpu", "neuron"):
            assert value(got, "accel_exporter_source_up", source=source) == 1
        # One utilization family for every vendor that has the quantity.
        assert len([k for k in got if k[0] == "accel_utilization_ratio"]) == 2 + 4
        check_metrics(text)
    finally:
        service.stop()
