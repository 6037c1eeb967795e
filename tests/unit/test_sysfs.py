"""The one sysfs reader: PCI functions, attributes, links and numbered device nodes."""

from __future__ import annotations

import os
import re

import pytest

from exporter.host.sysfs import (
    SysfsError,
    hex_attr,
    link_name,
    numbered_nodes,
    pci_functions,
    pci_present,
    read_attr,
)


def test_pci_functions_in_bus_order_with_their_attributes(tmp_path):
    base = tmp_path / "bus" / "pci" / "devices"
    for name in ("0000:3B:00.1", "0000:3b:00.0", "0000:1a:00.0", "not-a-device"):
        (base / name).mkdir(parents=True)
    (base / "0000:3b:00.0" / "vendor").write_text("0x10de\n")
    (base / "0000:3b:00.0" / "physfn").mkdir()
    groups = tmp_path / "kernel" / "iommu_groups" / "17"
    groups.mkdir(parents=True)
    os.symlink(groups, base / "0000:1a:00.0" / "iommu_group")
    found = pci_functions(tmp_path)
    assert [f.address for f in found] == ["0000:1a:00.0", "0000:3b:00.0", "0000:3b:00.1"]
    first, gpu, other = found
    assert gpu.hex("vendor") == 0x10DE and gpu.attr("vendor") == "0x10de"
    assert gpu.is_virtual and not other.is_virtual
    assert gpu.slot == other.slot == "0000:3b:00"
    assert first.iommu_group() == 17 and gpu.iommu_group() is None
    assert pci_present(tmp_path, "0000:1a:00.0") and not pci_present(tmp_path, "0000:99:00.0")


def test_what_cannot_be_read(tmp_path):
    with pytest.raises(SysfsError, match="bus/pci/devices"):
        pci_functions(tmp_path)
    (tmp_path / "class").write_text("garbage")
    with pytest.raises(SysfsError, match="class"):
        hex_attr(tmp_path / "class")
    assert read_attr(tmp_path / "missing") == ""
    assert read_attr(tmp_path / "class", limit=3) == "gar"
    os.symlink("/nonexistent-target", tmp_path / "dangling")
    assert link_name(tmp_path / "dangling") == ""
    assert numbered_nodes(tmp_path / "no-dev", re.compile(r"^accel(\d+)$")) == {}


def test_numbered_nodes(tmp_path):
    for name in ("accel0", "accel12", "accel", "vfio", "accelx1"):
        (tmp_path / name).touch()
    nodes = numbered_nodes(tmp_path, re.compile(r"^accel(\d+)$"))
    assert nodes == {0: tmp_path / "accel0", 12: tmp_path / "accel12"}
