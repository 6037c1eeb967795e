"""Which GPUs a NIC serves: the same PCIe switch, else the same NUMA node, else none."""

from __future__ import annotations

from exporter.fabric.join import Placement, served

GPUS = [
    Placement("0000:18:00.0", "0000:16:00.0", 0),
    Placement("0000:1a:00.0", "0000:16:00.0", 0),
    Placement("0000:24:00.0", "0000:22:00.0", 1),
    Placement("0000:30:00.0", "", 1),  # right under a root port
]


def test_the_gpus_behind_the_nics_switch_and_only_those() -> None:
    nic = Placement("0000:19:00.0", "0000:16:00.0", 0)
    assert served(nic, GPUS) == {"0000:18:00.0": "pcie_switch", "0000:1a:00.0": "pcie_switch"}


def test_no_gpu_behind_its_switch_means_the_gpus_of_its_numa_node() -> None:
    nic = Placement("0000:40:00.0", "0000:3e:00.0", 1)
    assert served(nic, GPUS) == {"0000:24:00.0": "numa_node", "0000:30:00.0": "numa_node"}
    under_root = Placement("0000:41:00.0", "", 0)
    assert served(under_root, GPUS) == {"0000:18:00.0": "numa_node", "0000:1a:00.0": "numa_node"}


def test_neither_a_switch_nor_a_numa_node_serves_nobody() -> None:
    assert served(Placement("0000:50:00.0", "", None), GPUS) == {}
    assert served(Placement("0000:50:00.0", "0000:4e:00.0", None), GPUS) == {}
    assert served(Placement("0000:19:00.0", "0000:16:00.0", 0), []) == {}
