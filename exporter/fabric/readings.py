"""The fabric source's readings, from what one pass read and what the ledger keeps.

Pure functions: :mod:`exporter.sources.fabric` reads and counts, this writes the
families of :mod:`exporter.catalog.fabric` (every label in catalog order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.fabric.ledger import FabricLedger
from exporter.family_names import (
    ACCEL_NIC_DISAPPEARANCES_TOTAL,
    ACCEL_NIC_GPU_INFO,
    ACCEL_NIC_INFO,
    ACCEL_NIC_MISSING,
    ACCEL_NIC_PORT_DATA_BYTES_TOTAL,
    ACCEL_NIC_PORT_ERRORS_TOTAL,
    ACCEL_NIC_PORT_FLAPS_TOTAL,
    ACCEL_NIC_PORT_HW_EVENTS_TOTAL,
    ACCEL_NIC_PORT_LAST_OUTAGE_SECONDS,
    ACCEL_NIC_PORT_OUTAGE_SECONDS_TOTAL,
    ACCEL_NIC_PORT_RATE_BYTES_PER_SECOND,
    ACCEL_NIC_PORT_STATE_INFO,
    ACCEL_NIC_PORT_UP,
    ACCEL_PCI_AER_ERRORS_TOTAL,
    ACCEL_PCI_DEVICE_INFO,
    ACCEL_PCI_LINK_DOWNTRAINED,
    ACCEL_PCI_LINK_MAX_SPEED_TRANSFERS_PER_SECOND,
    ACCEL_PCI_LINK_MAX_WIDTH,
    ACCEL_PCI_LINK_SPEED_TRANSFERS_PER_SECOND,
    ACCEL_PCI_LINK_WIDTH,
)
from exporter.host.infiniband import DATA_COUNTERS, ERROR_COUNTERS, HW_COUNTERS, Nic
from exporter.host.pcie import PciLink
from exporter.model import Reading


@dataclass(frozen=True)
class Identity:
    """A device as its device source names it."""

    device: str
    uuid: str


def nic_readings(
    ledger: FabricLedger,
    present: Mapping[str, Nic],
    named: Mapping[str, tuple[Identity, ...]],
    now: float,
) -> list[Reading]:
    """The NIC families: every NIC remembered, the ports of those present, the counts kept."""
    out = []
    for name, memory in sorted(ledger.nics.items()):
        info = (
            name,
            memory.pci_bus_id,
            memory.link_layer,
            memory.node_guid,
            memory.firmware_version,
            memory.numa_node,
            memory.pcie_switch,
        )
        out.append(Reading(ACCEL_NIC_INFO, info, 1.0))
        out.append(Reading(ACCEL_NIC_MISSING, (name,), 0.0 if memory.present else 1.0))
        out.append(Reading(ACCEL_NIC_DISAPPEARANCES_TOTAL, (name,), float(memory.disappearances)))
        for bus, via in sorted(memory.served.items()):
            for ident in named.get(bus, ()):
                out.append(
                    Reading(ACCEL_NIC_GPU_INFO, (name, ident.device, ident.uuid, bus, via), 1.0)
                )
    for name, nic in sorted(present.items()):
        for port in nic.ports:
            key = (name, str(port.number))
            out.append(Reading(ACCEL_NIC_PORT_UP, key, 1.0 if port.up else 0.0))
            out.append(
                Reading(
                    ACCEL_NIC_PORT_STATE_INFO,
                    (*key, port.state_word, port.phys_state_word),
                    1.0,
                )
            )
            if port.rate is not None:  # bits to the base unit, bytes
                out.append(Reading(ACCEL_NIC_PORT_RATE_BYTES_PER_SECOND, key, port.rate / 8))
            out.extend(
                Reading(ACCEL_NIC_PORT_ERRORS_TOTAL, (*key, c), float(port.counters[c]))
                for c in ERROR_COUNTERS
                if c in port.counters
            )
            out.extend(
                Reading(
                    ACCEL_NIC_PORT_DATA_BYTES_TOTAL,
                    (*key, direction),
                    float(port.counters[counter]),
                )
                for counter, direction in DATA_COUNTERS
                if counter in port.counters
            )
            out.extend(
                Reading(ACCEL_NIC_PORT_HW_EVENTS_TOTAL, (*key, c), float(port.hw_counters[c]))
                for c in HW_COUNTERS
                if c in port.hw_counters
            )
    for port_key, port_memory in sorted(ledger.ports.items()):
        nic_name, _, port_number = port_key.partition("/")
        labels = (nic_name, port_number)
        out.append(Reading(ACCEL_NIC_PORT_FLAPS_TOTAL, labels, float(port_memory.flaps)))
        outage = port_memory.outage_seconds(now)
        out.append(Reading(ACCEL_NIC_PORT_OUTAGE_SECONDS_TOTAL, labels, outage))
        if port_memory.last_outage is not None:
            out.append(Reading(ACCEL_NIC_PORT_LAST_OUTAGE_SECONDS, labels, port_memory.last_outage))
    return out


def pci_readings(
    accelerators: Mapping[str, int],
    links: Mapping[str, PciLink],
    present: Mapping[str, Nic],
    named: Mapping[str, tuple[Identity, ...]],
    switches: tuple[str, ...] = (),
) -> list[Reading]:
    """The PCI families: every accelerator, NIC and switch uplink, each one's training and AER."""
    out = []
    nic_at = {nic.pci_bus_id: name for name, nic in present.items() if nic.pci_bus_id}
    for address in sorted(accelerators):
        for ident in named.get(address, (Identity("", ""),)):
            out.append(
                Reading(
                    ACCEL_PCI_DEVICE_INFO,
                    (address, "accelerator", ident.device, ident.uuid, ""),
                    1.0,
                )
            )
    for address, name in sorted(nic_at.items()):
        out.append(Reading(ACCEL_PCI_DEVICE_INFO, (address, "nic", "", "", name), 1.0))
    for address in switches:
        out.append(Reading(ACCEL_PCI_DEVICE_INFO, (address, "pcie_switch", "", "", ""), 1.0))
    for address, link in sorted(links.items()):
        bus = (address,)
        if link.speed is not None:
            out.append(Reading(ACCEL_PCI_LINK_SPEED_TRANSFERS_PER_SECOND, bus, link.speed))
        if link.max_speed is not None:
            out.append(Reading(ACCEL_PCI_LINK_MAX_SPEED_TRANSFERS_PER_SECOND, bus, link.max_speed))
        if link.width is not None:
            out.append(Reading(ACCEL_PCI_LINK_WIDTH, bus, float(link.width)))
        if link.max_width is not None:
            out.append(Reading(ACCEL_PCI_LINK_MAX_WIDTH, bus, float(link.max_width)))
        known = (link.width is not None and link.max_width is not None) or (
            link.speed is not None and link.max_speed is not None
        )
        if known:
            value = 1.0 if link.downtrained() else 0.0
            out.append(Reading(ACCEL_PCI_LINK_DOWNTRAINED, bus, value))
        out.extend(
            Reading(ACCEL_PCI_AER_ERRORS_TOTAL, (address, severity), float(count))
            for severity, count in sorted(link.aer.items())
        )
    return out
