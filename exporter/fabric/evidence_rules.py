"""What the fabric tells a GPU's verdict: evidence for the board (exporter.evidence).

Five reasons, each ``degraded`` (the GPU works; its path to the job's traffic does
not work as it should), never ``failed``, and each posted by the GPU's PCI bus id so
it reaches the GPU's verdict whichever source judges it:

- ``pcie_link_downtrained``: the GPU's own link trained below its maximum (fewer
  lanes, or a speed between the idle 2.5 GT/s and the maximum), seen at two polls in
  a row (a link is read while it retrains).
- ``pcie_switch_link_downtrained``: the same of the uplink of the PCIe switch above the
  GPU (every GPU and NIC behind it shares that link to the CPU).
- ``nic_pcie_link_downtrained``: the same of a NIC that serves the GPU.
- ``nic_port_down``: a port of a NIC that serves the GPU went down after it was up
  and is still down (an outage under way).
- ``nic_missing``: a NIC that served the GPU is gone from /sys/class/infiniband.

Error *rates* (AER, IB counters) are not here: they are trends, judged over
consecutive windows by exporter.trend.
"""

from __future__ import annotations

import time

from exporter.actions import INSPECT_HARDWARE, REPLACE_DEVICE, Advice
from exporter.evidence import Evidence
from exporter.host.pcie import PciLink
from exporter.verdict import DEGRADED

SOURCE = "fabric"
GPU_DOWNTRAINED = "pcie_link_downtrained"
NIC_DOWNTRAINED = "nic_pcie_link_downtrained"
SWITCH_DOWNTRAINED = "pcie_switch_link_downtrained"
NIC_PORT_DOWN = "nic_port_down"
NIC_MISSING = "nic_missing"
REASONS = (GPU_DOWNTRAINED, SWITCH_DOWNTRAINED, NIC_DOWNTRAINED, NIC_PORT_DOWN, NIC_MISSING)

AMD_PCI_VENDOR = 0x1002
# AMD's service action guide names both conditions and their procedure (the node
# conditions of the GPU Operator's remediation ConfigMap, derived from the guide's JSON:
# /work/shared/reference/afid-table.md section 2, docs/fabric.md).
AMD_GUIDE = (
    "AMD Service Action Guide ConfigMap (ROCm/gpu-operator default-configmap.yaml @ e1b65568)"
)
AMD_CONDITIONS = {
    "width": "AMDGPUPcieLinkWidthNotCorrect",
    "speed": "AMDGPUPcieLinkSpeedNotCorrect",
}
AMD_PROCEDURE = (
    "AMD's PCIe procedure: run agfhc -t pcie_link_status; check the upstream switches and"
    " root ports for host errors and their mechanical connection; reseat the GPU tray;"
    " repeat; if it still fails, RMA the UBB (all eight OAMs) with the AER, SEL and dmesg logs"
)
RULE = "accel-exporter fabric rule (docs/fabric.md)"


def _speed(value: float | None) -> str:
    return "?" if value is None else f"{value / 1e9:.1f} GT/s"


def describe(link: PciLink) -> str:
    """``x8 of x16 lanes, 32.0 of 32.0 GT/s`` (what a detail says of a link)."""
    width = f"x{link.width if link.width is not None else '?'}"
    most = f"x{link.max_width if link.max_width is not None else '?'}"
    return f"{width} of {most} lanes, {_speed(link.speed)} of {_speed(link.max_speed)}"


def downtrained_advice(vendor: int | None, what: str) -> Advice:
    """What a GPU trained below its maximum asks for: AMD's guide for AMD, else our rule."""
    if vendor == AMD_PCI_VENDOR:
        condition = " + ".join(AMD_CONDITIONS[part] for part in what.split("+"))
        return Advice(
            INSPECT_HARDWARE,
            "baseboard",
            REPLACE_DEVICE,
            AMD_PROCEDURE,
            "vendor_catalog",
            f"{AMD_GUIDE}: {condition}",
            "baseboard",
        )
    return Advice(
        INSPECT_HARDWARE,
        "device",
        "",
        "check the PCIe path: reseat the GPU (or its riser or cable), check the switch"
        " port and slot; compare lspci -vv LnkSta with LnkCap after a reboot",
        "exporter_rule",
        RULE,
    )


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


# Each item is dated by when its condition began (``since``), never by the poll that
# posts it again: the finding it makes stays the same from poll to poll.


def gpu_downtrained(
    link: PciLink, what: str, vendor: int | None, since: float, expires: float
) -> Evidence:
    """The GPU's own link trained below its maximum."""
    return Evidence(
        SOURCE,
        GPU_DOWNTRAINED,
        DEGRADED,
        downtrained_advice(vendor, what),
        since,
        expires,
        f"PCIe link at {describe(link)} ({what} below the maximum)",
    )


_NIC_PATH = Advice(
    INSPECT_HARDWARE,
    "device",
    "",
    "the GPU's RDMA path is impaired: reseat the NIC or check its slot and PCIe switch port;"
    " its jobs lose bandwidth or the fabric",
    "exporter_rule",
    RULE,
)
_NIC_PORT = Advice(
    INSPECT_HARDWARE,
    "device",
    "",
    "the GPU's NIC port is down: check the cable or transceiver and the fabric switch port"
    " (ibstat, the switch's port log)",
    "exporter_rule",
    RULE,
)
_NIC_GONE = Advice(
    INSPECT_HARDWARE,
    "device",
    "",
    "the GPU's NIC fell off the bus or its driver unloaded: check dmesg (mlx5_core, AER)"
    " and lspci; reseat it if it does not come back after a reboot",
    "exporter_rule",
    RULE,
)


_SWITCH_PATH = Advice(
    INSPECT_HARDWARE,
    "device",
    "",
    "the PCIe switch above the GPU trained its uplink below its maximum: every GPU and NIC"
    " behind it shares the lost bandwidth; check the switch's seating and its riser or cable"
    " to the CPU",
    "exporter_rule",
    RULE,
)


def switch_downtrained(link: PciLink, what: str, since: float, expires: float) -> Evidence:
    """The uplink of the PCIe switch above the GPU trained below its maximum."""
    return Evidence(
        SOURCE,
        SWITCH_DOWNTRAINED,
        DEGRADED,
        _SWITCH_PATH,
        since,
        expires,
        f"PCIe switch {link.address} uplink at {describe(link)} ({what} below the maximum)",
    )


def nic_downtrained(nic: str, link: PciLink, what: str, since: float, expires: float) -> Evidence:
    """A NIC serving the GPU trained below its maximum."""
    return Evidence(
        SOURCE,
        NIC_DOWNTRAINED,
        DEGRADED,
        _NIC_PATH,
        since,
        expires,
        f"NIC {nic} ({link.address}) PCIe link at {describe(link)} ({what} below the maximum)",
    )


def nic_port_down(nic: str, port: str, since: float, expires: float) -> Evidence:
    """A port of a NIC serving the GPU is down (it was up)."""
    return Evidence(
        SOURCE,
        NIC_PORT_DOWN,
        DEGRADED,
        _NIC_PORT,
        since,
        expires,
        f"NIC {nic} port {port} down since {_utc(since)}",
    )


def nic_missing(nic: str, address: str, since: float, expires: float) -> Evidence:
    """A NIC that served the GPU is gone."""
    where = f" ({address})" if address else ""
    return Evidence(
        SOURCE,
        NIC_MISSING,
        DEGRADED,
        _NIC_GONE,
        since,
        expires,
        f"NIC {nic}{where} missing since {_utc(since)}",
    )
