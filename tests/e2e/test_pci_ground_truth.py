"""The PCI bus as ground truth for the device count, through the daemon with a fake sysfs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.e2e.test_nvml_daemon import nvml_config
from tests.helpers.daemon import samples, value
from tests.helpers.fakesys import NVIDIA, FakeSys


def test_bus_has_more_gpus_than_the_library_sees(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    FakeSys(tmp_path / "sys").gpu_node(NVIDIA, 8)
    fake = fake_nvml(7)
    d = daemon_factory(nvml_config(sys_path=str(tmp_path / "sys")), env=fake.env())
    # The bus count is shown from the start, the library's once its worker answered.
    d.wait_metric("accel_devices", 7, vendor="nvidia")
    got = samples(d.metrics())
    assert value(got, "accel_pci_devices", vendor="nvidia") == 8
    assert value(got, "accel_exporter_source_up", source="nvml") == 1
    assert d.status()["sources"]["nvml"]["pci_devices"] == 8


def test_driver_never_loaded_still_counts_the_bus(daemon_factory: Any, tmp_path: Path) -> None:
    FakeSys(tmp_path / "sys").gpu_node(NVIDIA, 4)
    # No fake library on the search path: NVML cannot load, as on a node whose
    # driver was never installed or injected into the container.
    d = daemon_factory(
        nvml_config(sys_path=str(tmp_path / "sys")), env={"LD_LIBRARY_PATH": str(tmp_path)}
    )
    d.wait_metric(
        "accel_exporter_source_unavailable_info", 1, source="nvml", reason="library_not_found"
    )
    got = samples(d.metrics())
    assert value(got, "accel_pci_devices", vendor="nvidia") == 4
    assert value(got, "accel_devices", vendor="nvidia") is None


def test_unreadable_sysfs_leaves_the_count_out(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    fake = fake_nvml(2)
    d = daemon_factory(nvml_config(sys_path=str(tmp_path / "no-sys")), env=fake.env())
    d.wait_metric("accel_device_up", 1, device="1", uuid=fake.uuid(1))
    d.wait_for(lambda: "pci_problem" in d.status()["sources"]["nvml"], 10, what="the problem")
    text = d.metrics()
    assert not [
        line for line in text.splitlines() if line.startswith('accel_pci_devices{vendor="nvidia"')
    ]
    assert value(text, "accel_exporter_source_up", source="nvml") == 1
    time.sleep(3)  # a few more polls and rescans (1 s each): logged once, not each time
    logged = [line for line in d.lines if "PCI device count unavailable" in line]
    assert len(logged) == 1, logged


def test_gpu_hung_at_enumeration_is_named_by_its_bus_address(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    bus = FakeSys(tmp_path / "sys").gpu_node(NVIDIA, 4)
    fake = fake_nvml(4)
    rule = fake.add_rule("*", device=1, hang=True)
    config = nvml_config(sys_path=str(tmp_path / "sys"), timeout="2s", bootstrap_timeout="4s")
    d = daemon_factory(config, env=fake.env())
    sick = {"device": "1", "uuid": "unidentified-1"}
    d.wait_metric("accel_device_up", 0, timeout=30, **sick)

    def sick_info() -> list[Any]:
        got = samples(d.metrics())
        return [
            k for k in got if k[0] == "accel_device_info" and ("uuid", "unidentified-1") in k[1]
        ]

    # Shown down as soon as it is isolated; named by its address once the GPUs around it
    # are described (by the replacement worker): NVML numbers GPUs in bus order, the bus
    # holds as many as NVML numbers, and every GPU it did describe sits at its own index
    # on the bus, so GPU 1 is the second address.
    d.wait_for(
        lambda: any(("pci_bus_id", bus[1]) in k[1] for k in sick_info()),
        timeout=30,
        what="the hung GPU named by its bus address",
    )
    assert len(sick_info()) == 1
    fake.release(rule)
    d.wait_metric("accel_device_up", 1, timeout=60, device="1", uuid=fake.uuid(1))
    d.stop()
    assert d.leftover_children() == set()
