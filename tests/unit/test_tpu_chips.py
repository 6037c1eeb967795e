"""TPU chips counted from a host tree: PCI vendor 0x1ae0, libtpu's order, /dev fallback."""

from __future__ import annotations

from pathlib import Path

from exporter.host.tpu_chips import present, scan
from tests.fakes.tpu.control import V4, V5E, V7X, bdf, make_host


def test_v5e_chips_in_vfio_group_order(tmp_path: Path) -> None:
    chips = scan(str(make_host(tmp_path, 3, V5E)))
    assert [(c.pci_bus_id, c.node, c.model, c.devices_per_chip) for c in chips] == [
        (bdf(i), f"/dev/vfio/{10 + i}", "TPU v5e", 1) for i in range(3)
    ]


def test_v4_chips_use_accel_nodes(tmp_path: Path) -> None:
    chips = scan(str(make_host(tmp_path, 2, V4)))
    assert [(c.node, c.model) for c in chips] == [
        ("/dev/accel0", "TPU v4"),
        ("/dev/accel1", "TPU v4"),
    ]


def test_7x_has_two_devices_per_chip(tmp_path: Path) -> None:
    (chip,) = scan(str(make_host(tmp_path, 1, V7X)))
    assert chip.devices_per_chip == 2 and chip.model == "TPU 7x"


def test_functions_of_one_slot_are_one_chip(tmp_path: Path) -> None:
    root = make_host(tmp_path, 1, V4)
    second = root / "sys" / "bus" / "pci" / "devices" / bdf(0).replace(".0", ".1")
    second.mkdir()
    (second / "vendor").write_text("0x1ae0\n")
    (second / "device").write_text(V4 + "\n")
    assert len(scan(str(root))) == 1


def test_dev_nodes_alone_still_count(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for i in (0, 1, 10):
        (tmp_path / "dev" / f"accel{i}").write_text("")
    chips = scan(str(tmp_path))
    assert [c.node for c in chips] == ["/dev/accel0", "/dev/accel1", "/dev/accel10"]
    assert present(str(tmp_path), chips[2])
    (tmp_path / "dev" / "accel10").unlink()
    assert not present(str(tmp_path), chips[2])


def test_no_chips(tmp_path: Path) -> None:
    assert scan(str(tmp_path)) == []
