"""Fabric families: InfiniBand/RoCE NICs, PCIe training and AER, joined to the GPUs.

Filled by the fabric source (exporter.sources.fabric) from sysfs; docs/fabric.md
says what each means and what it does to a GPU's verdict. NICs are named by their
RDMA device (``nic="mlx5_0"``) and port number, PCI functions by their normalized
bus id (``pci_bus_id="0000:3b:00.0"``).
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import (
    AER_SEVERITIES,
    FABRIC_READ_REASONS,
    NIC_DATA_DIRECTIONS,
    NIC_ERROR_COUNTERS,
    NIC_HW_COUNTERS,
    NIC_PHYS_STATES,
    NIC_PORT_STATES,
    NIC_UNKNOWN_STATE,
)

PORT = ("nic", "port")
BUS = ("pci_bus_id",)
# How a NIC was joined to a GPU: behind the same PCIe switch, else on the same NUMA node.
JOIN_VIA = ("pcie_switch", "numa_node")
PCI_KINDS = ("accelerator", "nic", "pcie_switch")

ROWS = (
    MetricSpec(
        "accel_nic_info",
        Kind.INFO,
        "One RDMA NIC (InfiniBand or RoCE) from /sys/class/infiniband: its PCI function, "
        "link layer (of its first port), node GUID, firmware, NUMA node ('' when the "
        "platform names none) and the upstream port of the PCIe switch above it ('' under a "
        "root port). Kept while the NIC is missing, from the last time it was seen.",
        (
            "nic",
            "pci_bus_id",
            "link_layer",
            "node_guid",
            "firmware_version",
            "numa_node",
            "pcie_switch",
        ),
        max_series=budget.NICS,
    ),
    MetricSpec(
        "accel_nic_port_up",
        Kind.GAUGE,
        "1 when the port's logical state is ACTIVE (traffic can flow), else 0.",
        PORT,
        max_series=budget.NIC_PORTS,
    ),
    MetricSpec(
        "accel_nic_port_state_info",
        Kind.INFO,
        "The port's logical state (ports/N/state) and physical state (ports/N/phys_state) "
        "as words: active, down, init, armed; link_up, polling, disabled, ...",
        (*PORT, "state", "phys_state"),
        values={
            "state": (*NIC_PORT_STATES, NIC_UNKNOWN_STATE),
            "phys_state": (*NIC_PHYS_STATES, NIC_UNKNOWN_STATE),
        },
        max_series=budget.NIC_PORTS * (len(NIC_PORT_STATES) + 1) * (len(NIC_PHYS_STATES) + 1),
    ),
    MetricSpec(
        "accel_nic_port_rate_bytes_per_second",
        Kind.GAUGE,
        "The port's signalling rate (ports/N/rate, e.g. 200 Gb/sec (4X HDR) is 2.5e10), in "
        "bytes per second (the base unit, as node_infiniband_rate_bytes_per_second).",
        PORT,
        unit="bytes_per_second",
        max_series=budget.NIC_PORTS,
    ),
    MetricSpec(
        "accel_nic_port_errors_total",
        Kind.COUNTER,
        "The port's standard error and link counters (ports/N/counters, sysfs names) as the "
        "device counts them: a driver reload or reboot restarts them, which rate() takes as "
        "a reset. Counters the device lacks (N/A (no PMA)) are absent.",
        (*PORT, "counter"),
        otel_unit="{error}",
        values={"counter": NIC_ERROR_COUNTERS},
        max_series=budget.NIC_PORTS * len(NIC_ERROR_COUNTERS),
    ),
    MetricSpec(
        "accel_nic_port_data_bytes_total",
        Kind.COUNTER,
        "Bytes through the port (ports/N/counters/port_xmit_data and port_rcv_data, counted "
        "by the device in 4-byte words, multiplied here), by direction.",
        (*PORT, "direction"),
        unit="bytes",
        values={"direction": NIC_DATA_DIRECTIONS},
        max_series=budget.NIC_PORTS * len(NIC_DATA_DIRECTIONS),
    ),
    MetricSpec(
        "accel_nic_port_hw_events_total",
        Kind.COUNTER,
        "The driver's own port counters (ports/N/hw_counters) that the fabric moves: "
        "transport retries and timeouts, receive-buffer drops, RoCE congestion "
        "notifications. A driver names the subset it has.",
        (*PORT, "counter"),
        otel_unit="{event}",
        values={"counter": NIC_HW_COUNTERS},
        max_series=budget.NIC_PORTS * len(NIC_HW_COUNTERS),
    ),
    MetricSpec(
        "accel_nic_port_flaps_total",
        Kind.COUNTER,
        "Times the port went down after being up: state transitions seen from ACTIVE, and "
        "link_downed growth between two polls (a flap too short for a poll to see), each "
        "down counted once. Survives daemon restarts (the fabric state file).",
        PORT,
        otel_unit="{flap}",
        max_series=budget.NIC_PORTS,
    ),
    MetricSpec(
        "accel_nic_port_outage_seconds_total",
        Kind.COUNTER,
        "Seconds the port was down after being seen up, from the poll that saw it down to "
        "the poll that saw it up (the outage under way included). Survives daemon restarts.",
        PORT,
        unit="seconds",
        max_series=budget.NIC_PORTS,
    ),
    MetricSpec(
        "accel_nic_port_last_outage_seconds",
        Kind.GAUGE,
        "Length of the port's last outage that ended (down to up, to a poll interval).",
        PORT,
        unit="seconds",
        max_series=budget.NIC_PORTS,
    ),
    MetricSpec(
        "accel_nic_missing",
        Kind.GAUGE,
        "1 when a NIC seen before is gone from /sys/class/infiniband (fell off the bus, its "
        "driver unloaded), else 0. Remembered across daemon restarts.",
        ("nic",),
        max_series=budget.NICS,
    ),
    MetricSpec(
        "accel_nic_disappearances_total",
        Kind.COUNTER,
        "Times the NIC went from present to missing.",
        ("nic",),
        otel_unit="{disappearance}",
        max_series=budget.NICS,
    ),
    MetricSpec(
        "accel_nic_gpu_info",
        Kind.INFO,
        "A NIC joined to a GPU it serves: behind the same PCIe switch (via pcie_switch), "
        "else on the same NUMA node (via numa_node). device and uuid are the GPU's, as its "
        "device source names it; pci_bus_id is the GPU's. Join it with the job families "
        "on device and uuid (docs/fabric.md).",
        ("nic", "device", "uuid", "pci_bus_id", "via"),
        values={"via": JOIN_VIA},
        max_series=budget.NIC_GPU_PAIRS * len(JOIN_VIA),
    ),
    MetricSpec(
        "accel_pci_link_speed_transfers_per_second",
        Kind.GAUGE,
        "The PCIe link's current speed (current_link_speed), in transfers per second.",
        BUS,
        unit="transfers_per_second",
        max_series=budget.PCI_FUNCTIONS,
    ),
    MetricSpec(
        "accel_pci_link_max_speed_transfers_per_second",
        Kind.GAUGE,
        "The fastest PCIe speed the device supports (max_link_speed), in transfers per second.",
        BUS,
        unit="transfers_per_second",
        max_series=budget.PCI_FUNCTIONS,
    ),
    MetricSpec(
        "accel_pci_link_width",
        Kind.GAUGE,
        "The PCIe link's current width in lanes (current_link_width).",
        BUS,
        otel_unit="{lane}",
        max_series=budget.PCI_FUNCTIONS,
    ),
    MetricSpec(
        "accel_pci_link_max_width",
        Kind.GAUGE,
        "The widest PCIe link the device supports, in lanes (max_link_width).",
        BUS,
        otel_unit="{lane}",
        max_series=budget.PCI_FUNCTIONS,
    ),
    MetricSpec(
        "accel_pci_link_downtrained",
        Kind.GAUGE,
        "1 when the link trained below the device's maximum: fewer lanes, or a speed below "
        "the maximum yet above 2.5 GT/s (where an idle GPU parks its link to save power).",
        BUS,
        max_series=budget.PCI_FUNCTIONS,
    ),
    MetricSpec(
        "accel_pci_aer_errors_total",
        Kind.COUNTER,
        "PCIe Advanced Error Reporting counts the device saw (aer_dev_correctable, "
        "aer_dev_nonfatal, aer_dev_fatal: their TOTAL_ERR_* lines), by severity.",
        (*BUS, "severity"),
        otel_unit="{error}",
        values={"severity": AER_SEVERITIES},
        max_series=budget.PCI_FUNCTIONS * len(AER_SEVERITIES),
    ),
    MetricSpec(
        "accel_pci_device_info",
        Kind.INFO,
        "A PCI function the fabric source watches: an accelerator (device and uuid once its "
        "device source named it), an RDMA NIC (nic), or the upstream port of a PCIe switch "
        "above them (pcie_switch: its link is the switch's uplink to the CPU).",
        ("pci_bus_id", "kind", "device", "uuid", "nic"),
        values={"kind": PCI_KINDS},
        max_series=budget.PCI_FUNCTIONS * len(PCI_KINDS),
    ),
    MetricSpec(
        "accel_fabric_read_errors_total",
        Kind.COUNTER,
        "sysfs files the fabric source could not use, by reason: vanished (listed, gone "
        "when read: a device unplugged or unbound), unreadable (the read failed), malformed "
        "(not the kernel's format). Each costs only its own value.",
        ("reason",),
        otel_unit="{error}",
        values={"reason": FABRIC_READ_REASONS},
    ),
)
