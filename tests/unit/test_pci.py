"""Counting accelerators on the PCI bus from a fake sysfs, and odd trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.sources import pci
from tests.helpers.fakesys import (
    AMD,
    CLASS_ACCELERATOR,
    CLASS_DISPLAY_OTHER,
    CLASS_VGA,
    INTEL,
    NVIDIA,
    FakeSys,
)


def test_counts_gpus_only_in_bus_order(tmp_path: Path) -> None:
    sys = FakeSys(tmp_path)
    want = sys.gpu_node(NVIDIA, 8)
    assert pci.accelerators(str(tmp_path), "nvidia") == want
    assert pci.accelerators(str(tmp_path), "amd") == []
    assert pci.accelerators(str(tmp_path), "intel") == ["0000:00:02.0"]


def test_display_other_and_processing_accelerators_count(tmp_path: Path) -> None:
    sys = FakeSys(tmp_path)
    sys.add("0000:0a:00.0", AMD, CLASS_DISPLAY_OTHER)  # MI300X
    sys.add("0000:0b:00.0", AMD, CLASS_ACCELERATOR)
    sys.add("0000:0c:00.0", AMD, CLASS_VGA)
    sys.add("0000:0d:00.0", AMD, CLASS_DISPLAY_OTHER, virtfn=True)  # an SR-IOV VF: not ours
    assert pci.accelerators(str(tmp_path), "amd") == [
        "0000:0a:00.0",
        "0000:0b:00.0",
        "0000:0c:00.0",
    ]


def test_missing_tree_is_an_error_not_zero(tmp_path: Path) -> None:
    with pytest.raises(pci.PciError, match="bus/pci/devices"):
        pci.accelerators(str(tmp_path / "nowhere"), "nvidia")


def test_unreadable_class_is_an_error(tmp_path: Path) -> None:
    sys = FakeSys(tmp_path)
    d = sys.add("0000:18:00.0", NVIDIA, CLASS_VGA)
    (d / "class").write_text("garbage\n")
    with pytest.raises(pci.PciError, match="class"):
        pci.accelerators(str(tmp_path), "nvidia")


def test_other_vendors_odd_entries_are_skipped(tmp_path: Path) -> None:
    sys = FakeSys(tmp_path)
    sys.add("0000:18:00.0", NVIDIA, CLASS_VGA)
    odd = sys.add("0000:19:00.0", INTEL, CLASS_VGA)
    (odd / "vendor").write_text("\xff\xfe")  # another vendor's function half-gone
    os.symlink("/nonexistent", sys.devices / "0000:1a:00.0")  # a dangling entry
    assert pci.accelerators(str(tmp_path), "nvidia") == ["0000:18:00.0"]


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("0001:3B:00.0", "0001:3b:00.0"),
        ("nonsense", "nonsense"),
    ],
)
def test_bus_ids_normalized(given: str, want: str) -> None:
    assert pci.normalize_bus_id(given) == want
