"""The NIC and PCIe readers on sysfs trees the kernel can leave: soft devices, no PMA, races."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.host.infiniband import read_nics
from exporter.host.pcie import read_link
from exporter.host.sysfs_read import ReadProblem, Unread, read_text
from tests.fakes.fabric_sysfs import FabricSysfs, write


def tree(tmp_path: Path, count: int = 1) -> FabricSysfs:
    fake = FabricSysfs(tmp_path / "sys")
    fake.node(count)
    return fake


def test_a_counter_without_a_pma_is_absent_not_zero(tmp_path: Path) -> None:
    fake = tree(tmp_path)
    fake.set_counter("mlx5_0", "symbol_error", "N/A (no PMA)")
    scan = read_nics(str(fake.root))
    (port,) = scan.nics[0].ports
    assert "symbol_error" not in port.counters and port.counters["link_downed"] == 0
    assert scan.problems == []


def test_a_soft_rdma_device_without_a_pci_function_is_read_without_one(tmp_path: Path) -> None:
    fake = FabricSysfs(tmp_path / "sys")
    dev = tmp_path / "sys" / "devices" / "virtual" / "infiniband" / "rxe0"
    write(dev / "node_guid", "5054:00ff:fe12:3456\n")
    write(dev / "ports" / "1" / "state", "4: ACTIVE\n")
    write(dev / "ports" / "1" / "link_layer", "Ethernet\n")
    fake.ib.mkdir(parents=True)
    (fake.ib / "rxe0").symlink_to(os.path.relpath(dev, fake.ib))
    (nic,) = read_nics(str(fake.root)).nics
    assert (nic.name, nic.pci_bus_id, nic.pci_path, nic.numa_node) == ("rxe0", "", "", None)
    assert nic.ports[0].up and nic.ports[0].link_layer == "Ethernet"
    assert nic.ports[0].rate is None and nic.ports[0].phys_state_word == "unknown"


def test_ports_are_numbered_and_other_entries_ignored(tmp_path: Path) -> None:
    fake = FabricSysfs(tmp_path / "sys")
    fake.nic("mlx5_0", ("pci0000:00", "0000:00:01.0", "0000:01:00.0"), ports=2)
    (fake.ib / "mlx5_0" / "ports" / "README").write_text("not a port")
    (nic,) = read_nics(str(fake.root)).nics
    assert [p.number for p in nic.ports] == [1, 2]


def test_a_nic_gone_between_the_listing_and_the_read_is_left_out_and_counted(
    tmp_path: Path,
) -> None:
    fake = tree(tmp_path, 2)
    # Its class link still listed, its device gone (unbound mid-pass).
    target = (fake.ib / "mlx5_1").resolve()
    os.rename(target, target.with_name("moved"))
    scan = read_nics(str(fake.root))
    assert [n.name for n in scan.nics] == ["mlx5_0"]
    assert [p.reason for p in scan.problems] == ["vanished"]


def test_a_port_whose_state_is_garbage_is_left_out(tmp_path: Path) -> None:
    fake = tree(tmp_path)
    write(fake.port_dir("mlx5_0") / "state", "ACTIVE\n")
    scan = read_nics(str(fake.root))
    assert scan.nics[0].ports == ()
    assert [p.reason for p in scan.problems] == ["malformed"]


def test_a_device_without_aer_or_link_files_has_no_values_and_no_problem(tmp_path: Path) -> None:
    fake = tree(tmp_path)
    gpu = fake.paths["0000:18:00.0"]
    for name in ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal", "max_link_width"):
        os.unlink(gpu / name)
    problems: list[ReadProblem] = []
    link = read_link(str(fake.root), "0000:18:00.0", problems)
    assert link is not None and problems == []
    assert (link.aer, link.width, link.max_width, link.downtrained()) == ({}, 16, None, "")
    assert read_link(str(fake.root), "0000:99:00.0", problems) is None  # not on the bus


def test_a_truncated_aer_table_is_malformed(tmp_path: Path) -> None:
    fake = tree(tmp_path)
    gpu = fake.paths["0000:18:00.0"]
    write(gpu / "aer_dev_fatal", "Undefined 0\nDLP 0\n")
    problems: list[ReadProblem] = []
    link = read_link(str(fake.root), "0000:18:00.0", problems)
    assert link is not None and set(link.aer) == {"correctable", "nonfatal"}
    assert [(Path(p.path).name, p.reason) for p in problems] == [("aer_dev_fatal", "malformed")]


def test_read_text_says_why(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text(" 4: ACTIVE \n")
    assert read_text(str(tmp_path / "ok")) == "4: ACTIVE"
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    (tmp_path / "dir").mkdir()
    for name, reason in (("gone", "vanished"), ("dir", "unreadable"), ("bin", "malformed")):
        with pytest.raises(Unread) as caught:
            read_text(str(tmp_path / name))
        assert caught.value.problem.reason == reason
