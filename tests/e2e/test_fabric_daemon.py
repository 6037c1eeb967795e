"""The fabric source in the real daemon, beside the fake NVML, on a fake sysfs.

Two GPUs and two InfiniBand NICs behind two PCIe switches (tests/fakes/fabric_sysfs.py,
the GPUs at the bus ids the fake NVML reports): the joins, a GPU trained at x8 and its
verdict, a NIC removed, files that vanish or fail, a counter going backwards, and a
port flapping three times across a daemon restart.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tests.e2e.test_nvml_daemon import OTHERS_OFF
from tests.fakes.fabric_sysfs import FabricSysfs
from tests.helpers.daemon import samples, value
from tests.helpers.promtool import check_metrics


def config(sys_path: Path, state: Path) -> dict[str, Any]:
    return {
        "sources": {
            **OTHERS_OFF,
            "nvml": {"interval": "1s", "slow_interval": "1s", "sys_path": str(sys_path)},
            "fabric": {"interval": "500ms", "sys_path": str(sys_path), "state_dir": str(state)},
        },
    }


def family(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (metric, labels), v in samples(text).items() if metric == name}


def test_joins_a_downtrained_gpu_a_lost_nic_and_bad_files(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    tree = FabricSysfs(tmp_path / "sys")
    tree.node(2)
    tree.set_link("0000:24:00.0", width=8)  # GPU 1 trained at x8 of x16
    fake = fake_nvml(2)
    u0, u1 = fake.uuid(0), fake.uuid(1)
    d = daemon_factory(config(tree.root, tmp_path / "state"), env=fake.env())
    gpu1 = {"device": "1", "uuid": u1}
    d.wait_metric("accel_device_health", 1, timeout=30, state="degraded", **gpu1)
    text = d.metrics()
    # Each NIC joined to the GPU behind its own switch, named as NVML names it.
    assert family(text, "accel_nic_gpu_info") == {
        (("device", "0"), ("nic", "mlx5_0"), ("pci_bus_id", "0000:18:00.0"), ("uuid", u0),
         ("via", "pcie_switch")): 1.0,
        (("device", "1"), ("nic", "mlx5_1"), ("pci_bus_id", "0000:24:00.0"), ("uuid", u1),
         ("via", "pcie_switch")): 1.0,
    }  # fmt: skip
    assert value(text, "accel_pci_link_width", pci_bus_id="0000:24:00.0") == 8
    assert value(text, "accel_pci_link_max_width", pci_bus_id="0000:24:00.0") == 16
    assert value(text, "accel_pci_link_downtrained", pci_bus_id="0000:24:00.0") == 1
    assert value(text, "accel_pci_link_downtrained", pci_bus_id="0000:18:00.0") == 0
    assert value(text, "accel_device_health_reason_info", reason="pcie_link_downtrained", **gpu1)
    assert value(text, "accel_device_health", state="ok", device="0", uuid=u0) == 1
    assert value(text, "accel_exporter_source_up", source="fabric") == 1
    assert value(text, "accel_fabric_read_errors_total", reason="vanished") == 0
    check_metrics(text)

    # A counter listed and gone when read; another unreadable; link_downed going back.
    counters = tree.port_dir("mlx5_0") / "counters"
    os.unlink(counters / "symbol_error")
    (counters / "symbol_error").symlink_to(counters / "unplugged")
    os.unlink(counters / "port_rcv_errors")
    (counters / "port_rcv_errors").mkdir()
    tree.set_counter("mlx5_0", "link_downed", 7)
    d.wait_metric("accel_nic_port_errors_total", 7, nic="mlx5_0", port="1", counter="link_downed")
    tree.set_counter("mlx5_0", "link_downed", 0)  # a driver reload
    d.wait_metric("accel_nic_port_errors_total", 0, nic="mlx5_0", port="1", counter="link_downed")
    text = d.metrics()
    assert value(text, "accel_fabric_read_errors_total", reason="vanished") >= 1
    assert value(text, "accel_fabric_read_errors_total", reason="unreadable") >= 1
    assert value(text, "accel_exporter_source_up", source="fabric") == 1
    assert value(text, "accel_nic_port_errors_total", nic="mlx5_0", port="1",
                 counter="symbol_error") is None  # fmt: skip
    assert value(text, "accel_nic_port_errors_total", nic="mlx5_0", port="1",
                 counter="link_error_recovery") == 0  # fmt: skip
    # 0 -> 7 is growth the link went down for (7 flaps); 7 -> 0 is a new baseline, not -7.
    assert value(text, "accel_nic_port_flaps_total", nic="mlx5_0", port="1") == 7
    assert value(text, "accel_nic_port_up", nic="mlx5_0", port="1") == 1

    # NIC 1 falls off the bus: missing, counted once, and GPU 1 says so.
    tree.remove_nic("mlx5_1")
    d.wait_metric("accel_nic_missing", 1, nic="mlx5_1")
    d.wait_metric("accel_device_health_reason_info", 1, reason="nic_missing", **gpu1)
    text = d.metrics()
    assert value(text, "accel_nic_disappearances_total", nic="mlx5_1") == 1
    assert value(text, "accel_nic_missing", nic="mlx5_0") == 0
    assert value(text, "accel_nic_gpu_info", nic="mlx5_1", device="1", uuid=u1,
                 pci_bus_id="0000:24:00.0", via="pcie_switch") == 1  # fmt: skip
    assert value(text, "accel_device_health", state="ok", device="0", uuid=u0) == 1


def test_three_flaps_across_a_restart_lose_no_count(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    tree = FabricSysfs(tmp_path / "sys")
    tree.node(2)
    fake = fake_nvml(2)
    cfg = config(tree.root, tmp_path / "state")
    port = {"nic": "mlx5_0", "port": "1"}
    gpu0 = {"device": "0", "uuid": fake.uuid(0)}
    d = daemon_factory(cfg, env=fake.env())
    d.wait_metric("accel_nic_port_up", 1, timeout=30, **port)
    for _ in range(2):
        tree.port_down("mlx5_0")
        d.wait_metric("accel_nic_port_up", 0, **port)
        tree.port_up("mlx5_0")
        d.wait_metric("accel_nic_port_up", 1, **port)
    text = d.metrics()
    assert value(text, "accel_nic_port_flaps_total", **port) == 2
    two = value(text, "accel_nic_port_outage_seconds_total", **port)
    assert two is not None and two > 0
    # The third flap: the daemon stops while the port is down.
    tree.port_down("mlx5_0")
    d.wait_metric("accel_nic_port_flaps_total", 3, **port)
    d.wait_metric("accel_device_health_reason_info", 1, reason="nic_port_down", **gpu0)
    d.stop()
    stopped = time.monotonic()
    again = daemon_factory(cfg, env=fake.env())
    again.wait_metric("accel_nic_port_up", 0, timeout=30, **port)
    tree.port_up("mlx5_0")
    away = time.monotonic() - stopped
    again.wait_metric("accel_nic_port_up", 1, **port)
    text = again.metrics()
    assert value(text, "accel_nic_port_flaps_total", **port) == 3
    assert value(text, "accel_nic_port_errors_total", counter="link_downed", **port) == 3
    last = value(text, "accel_nic_port_last_outage_seconds", **port)
    # The third outage began before the restart and ended after it: timed across it.
    assert last is not None and last >= away
    total = value(text, "accel_nic_port_outage_seconds_total", **port)
    assert total is not None and abs(total - (two + last)) < 1e-6  # closed: none under way
    assert value(text, "accel_nic_port_flaps_total", nic="mlx5_1", port="1") == 0
    again.wait_metric("accel_device_health", 1, state="ok", **gpu0)
