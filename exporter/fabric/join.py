"""Which GPUs a NIC serves, by PCI topology: the same PCIe switch, else the same NUMA node.

A GPU and a NIC behind one PCIe switch exchange GPUDirect RDMA traffic without
crossing the CPU: that NIC is the GPU's path to the fabric (what ``nvidia-smi topo``
calls PIX or PXB). A NIC with no GPU behind its switch (under a root port of its
own) serves the GPUs of its NUMA node, across the CPU's root complex (NODE). A NIC
with neither serves no GPU here. Pure functions over addresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SWITCH, NUMA = "pcie_switch", "numa_node"


@dataclass(frozen=True)
class Placement:
    """Where a PCI function sits: its address, its switch ("" none), its NUMA node."""

    address: str
    pcie_switch: str
    numa_node: int | None


def served(nic: Placement, gpus: Sequence[Placement]) -> dict[str, str]:
    """GPU address -> how ``nic`` serves it (``pcie_switch`` or ``numa_node``)."""
    if nic.pcie_switch:
        behind = {g.address: SWITCH for g in gpus if g.pcie_switch == nic.pcie_switch}
        if behind:
            return behind
    if nic.numa_node is None:
        return {}
    return {g.address: NUMA for g in gpus if g.numa_node == nic.numa_node}
