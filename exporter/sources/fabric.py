"""The fabric source: RDMA NIC ports and PCIe training from sysfs, joined to the GPUs.

Each poll reads, in one blocking call on its own thread, every NIC under
``<sys>/class/infiniband`` (:mod:`exporter.host.infiniband`) and the PCIe link of
every accelerator on the bus (the PCI census's test, :mod:`exporter.sources.pci`) and
of every NIC (:mod:`exporter.host.pcie`). It then counts flaps and outages
(:mod:`exporter.fabric.ports`), NICs that disappeared, joins each NIC to the GPUs it
serves (:mod:`exporter.fabric.join`), names those GPUs by what the device sources
last reported (``accel_device_info``, read from the store like every enricher), and
posts what a GPU's verdict must know to the evidence board
(:mod:`exporter.fabric.evidence_rules`). The counts persist in the fabric state
file (:mod:`exporter.fabric.ledger`).

A host without /sys/class/infiniband has no NICs: no error. A file that vanishes
between a listing and its read, fails, or holds text the kernel does not write is
counted by reason (``accel_fabric_read_errors_total``) and costs only its own value;
the source stays up. A NIC joins GPUs in ``accel_nic_gpu_info`` only once a device
source has named them (device and uuid): before, the join is not guessed at
(``accel_pci_device_info`` shows the GPU by its address alone meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter import log, trend
from exporter.catalog.device import INFO_LABELS
from exporter.config.fabric import FabricSourceConfig
from exporter.evidence import BOARD, Evidence, EvidenceBoard
from exporter.fabric import evidence_rules as rules
from exporter.fabric.join import Placement, served
from exporter.fabric.ledger import FabricLedger, NicMemory
from exporter.fabric.ports import observe
from exporter.fabric.readings import Identity, nic_readings, pci_readings
from exporter.family_names import (
    ACCEL_DEVICE_INFO,
    ACCEL_EXPORTER_STATE_ERRORS_TOTAL,
    ACCEL_FABRIC_READ_ERRORS_TOTAL,
)
from exporter.host.infiniband import Nic, read_nics
from exporter.host.pcie import PciLink, bridges_of, read_link, switch_of
from exporter.host.sysfs import SysfsError, hex_attr, pci_functions
from exporter.host.sysfs_read import READ_REASONS, ReadProblem
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source, StoreReader
from exporter.sources.pci import VENDOR_IDS, is_accelerator, normalize_bus_id

_KNOWN_VENDORS = frozenset(VENDOR_IDS.values())


_BUS = INFO_LABELS.index("pci_bus_id")
_DEVICE = INFO_LABELS.index("device")
_UUID = INFO_LABELS.index("uuid")


def identities(readings: Sequence[Reading]) -> dict[str, tuple[Identity, ...]]:
    """Normalized PCI bus id -> the devices the device sources name at that address.

    From ``accel_device_info``: a GPU split into partitions (MIG instances, AMD
    compute partitions) is several devices at one address, and jobs run on each.
    """
    out: dict[str, list[Identity]] = {}
    for reading in readings:
        labels = reading.labels
        if len(labels) <= _BUS or not labels[_BUS]:
            continue
        found = out.setdefault(normalize_bus_id(labels[_BUS]), [])
        ident = Identity(labels[_DEVICE], labels[_UUID])
        if ident not in found:
            found.append(ident)
    return {bus: tuple(sorted(f, key=lambda i: (i.device, i.uuid))) for bus, f in out.items()}


@dataclass
class Scan:
    """What one pass over sysfs read."""

    nics: list[Nic]
    # Accelerator address -> its PCI vendor id; None when the bus could not be listed.
    accelerators: dict[str, int] | None
    links: dict[str, PciLink]
    problems: list[ReadProblem] = field(default_factory=list)
    pci_problem: str = ""
    # The upstream ports of the PCIe switches above them (their links are in ``links``).
    switches: tuple[str, ...] = ()


def accelerators_on(sys_path: Path) -> dict[str, int]:
    """Address -> PCI vendor id of every accelerator on the bus (the PCI census's test).

    SysfsError when the bus cannot be listed; a function that vanishes while it is
    looked at is skipped.
    """
    out = {}
    for function in pci_functions(sys_path):
        try:
            vendor = hex_attr(function.path / "vendor")
            if vendor not in _KNOWN_VENDORS:
                continue
            accelerator = is_accelerator(hex_attr(function.path / "class"))
        except SysfsError:
            continue
        if accelerator and not function.is_virtual:
            out[function.address] = vendor
    return out


def scan(sys_path: str) -> Scan:
    """Read the NICs, the accelerators and every one's PCIe link (blocking)."""
    found = read_nics(sys_path)
    problems = list(found.problems)
    try:
        accelerators: dict[str, int] | None = accelerators_on(Path(sys_path))
        pci_problem = ""
    except SysfsError as exc:
        accelerators, pci_problem = None, str(exc)
    links: dict[str, PciLink] = {}
    wanted = [*(accelerators or {}), *(nic.pci_bus_id for nic in found.nics if nic.pci_bus_id)]
    for address in wanted:
        link = read_link(sys_path, address, problems)
        if link is not None:
            links[address] = link
    # The uplink of each switch above them (its upstream port to the root port): one
    # trained at x8 halves the bandwidth of every GPU and NIC behind it.
    switches = sorted({link.pcie_switch for link in links.values() if link.pcie_switch})
    for address in switches:
        link = read_link(sys_path, address, problems)
        if link is not None:
            links[address] = link
    return Scan(found.nics, accelerators, links, problems, pci_problem, tuple(switches))


class FabricSource(Source):
    """NIC ports, PCIe training and AER from sysfs; flaps, outages and GPU joins counted."""

    def __init__(
        self,
        name: str,
        config: FabricSourceConfig,
        state_dir: str = "",
        board: EvidenceBoard = BOARD,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name, config)
        self._wall = wall
        self.sys_path = config.sys_path
        self.state_dir = state_dir
        self.board = board
        self.ledger = FabricLedger(state_dir)
        self._call = BlockingCall(name)
        self._store: StoreReader | None = None
        self._log = log.get(source=name)
        self.read_errors: dict[str, int] = dict.fromkeys(READ_REASONS, 0)
        # (path, reason) of the files failing at the last poll: each logged once.
        self._failing: set[tuple[str, str]] = set()
        # Address -> (what is downtrained, since): seen at one poll, settled at the next.
        self._downtrained: dict[str, tuple[str, float, bool]] = {}
        self._pci_problem = ""
        self._last: Scan | None = None

    def fingerprint(self) -> tuple[Any, ...]:
        """The section and the state directory it fell back on."""
        return (*super().fingerprint(), self.state_dir)

    def attach(self, store: StoreReader) -> None:
        """Keep the store: the device sources' accel_device_info names the joined GPUs."""
        self._store = store

    def adopt(self, old: Source) -> None:
        """Go on with the counts of the source a reload replaces (same state file)."""
        if not isinstance(old, FabricSource):
            return
        if old.ledger.path == self.ledger.path:
            mine, self.ledger = self.ledger, old.ledger
            self.ledger.reclaim()  # before letting go of ours: the file's lock stays held
            mine.close()
        self.read_errors = dict(old.read_errors)
        self._failing = set(old._failing)
        self._downtrained = dict(old._downtrained)

    async def close(self) -> None:
        """Let go of the state file (its lock goes with the last claim in the process).

        The evidence posted stays until it expires (``stale_after``): a reload's new
        source posts its own at its first poll, and no verdict blinks meanwhile.
        """
        self.ledger.close()

    def status(self) -> dict[str, Any]:
        """The state file and what the last poll saw."""
        last = self._last
        out: dict[str, Any] = {"fabric_state": self.ledger.describe()}
        if last is not None:
            out["nics"] = len(last.nics)
            out["accelerators"] = None if last.accelerators is None else len(last.accelerators)
        if self._pci_problem:
            out["pci_problem"] = self._pci_problem
        return out

    async def poll(self) -> Sequence[Reading]:
        """One pass: read sysfs, count, join, post evidence, keep the counts."""
        found = await self._call(scan, self.sys_path)
        now = self._wall()
        self._last = found
        self._note_problems(found)
        view = self._store.view() if self._store is not None else None
        named = identities(view.readings(ACCEL_DEVICE_INFO) if view is not None else [])
        present = self._account_nics(found, now)
        readings = [
            *nic_readings(self.ledger, present, named, now),
            *pci_readings(found.accelerators or {}, found.links, present, named, found.switches),
        ]
        self._post(found, present, now)
        trend.fabric_trends(self.board).post(readings, time.monotonic(), now)
        readings.extend(
            Reading(ACCEL_FABRIC_READ_ERRORS_TOTAL, (r,), float(n))
            for r, n in self.read_errors.items()
        )
        for reason, count in sorted(self.ledger.errors.items()):
            readings.append(
                Reading(ACCEL_EXPORTER_STATE_ERRORS_TOTAL, (self.name, reason), float(count))
            )
        await self._call(self.ledger.save)
        return readings

    # -- what was read ---------------------------------------------------------

    def _note_problems(self, found: Scan) -> None:
        """Count each failed file by reason; log a file once when it starts failing."""
        failing = set()
        for problem in found.problems:
            self.read_errors[problem.reason] = self.read_errors.get(problem.reason, 0) + 1
            key = (problem.path, problem.reason)
            failing.add(key)
            if key not in self._failing:
                self._log.warning(
                    "sysfs file not used",
                    path=problem.path,
                    reason=problem.reason,
                    detail=problem.detail,
                )
        self._failing = failing
        if found.pci_problem != self._pci_problem:
            if found.pci_problem:
                self._log.warning("PCI bus not readable: no PCIe links", detail=found.pci_problem)
            self._pci_problem = found.pci_problem

    def _account_nics(self, found: Scan, now: float) -> dict[str, Nic]:
        """Update the ledger with the NICs and ports read; the NICs present, by name."""
        present = {nic.name: nic for nic in found.nics}
        self._follow_renames(present)
        gpus = None
        if found.accelerators is not None:
            gpus = [
                Placement(a, link.pcie_switch, link.numa_node)
                for a in found.accelerators
                if (link := found.links.get(a)) is not None
            ]
        for name, nic in present.items():
            memory = self.ledger.nics.get(name)
            if memory is None:
                memory = self.ledger.nics[name] = NicMemory()
            elif not memory.present:
                self._log.info("NIC back", nic=name, pci_bus_id=nic.pci_bus_id)
            memory.present, memory.missing_since = True, 0.0
            switch = switch_of(bridges_of(nic.pci_path)) if nic.pci_path else ""
            memory.pci_bus_id = nic.pci_bus_id
            memory.link_layer = nic.ports[0].link_layer if nic.ports else ""
            memory.node_guid = nic.node_guid
            memory.firmware_version = nic.firmware_version
            memory.numa_node = "" if nic.numa_node is None else str(nic.numa_node)
            memory.pcie_switch = switch
            if gpus is not None:
                memory.served = served(Placement(nic.pci_bus_id, switch, nic.numa_node), gpus)
            for port in nic.ports:
                self._observe_port(name, port.number, port.up, port.counters, now)
        for name, memory in self.ledger.nics.items():
            if name not in present and memory.present:
                memory.present, memory.missing_since = False, now
                memory.disappearances += 1
                self._log.warning(
                    "NIC missing",
                    nic=name,
                    pci_bus_id=memory.pci_bus_id,
                    served=sorted(memory.served),
                )
        return present

    def _follow_renames(self, present: Mapping[str, Nic]) -> None:
        """A NIC remembered under one name and present under another keeps its counts.

        RDMA device names follow the drivers' probe order (``mlx5_0`` may come back as
        ``mlx5_2`` after a reboot or a driver reload) unless udev renames them; the node
        GUID and the PCI address say it is the same NIC, not one lost and one new.
        """
        by_identity: dict[str, str] = {}
        for name, nic in present.items():
            for ident in (nic.node_guid, nic.pci_bus_id):
                if ident:
                    by_identity.setdefault(ident, name)
        for old in [n for n in self.ledger.nics if n not in present]:
            memory = self.ledger.nics[old]
            new = by_identity.get(memory.node_guid) or by_identity.get(memory.pci_bus_id)
            if new and new not in self.ledger.nics:
                self.ledger.rename(old, new)
                self._log.info("NIC renamed", nic=new, was=old, pci_bus_id=memory.pci_bus_id)

    def _observe_port(
        self, nic: str, number: int, up: bool, counters: Mapping[str, int], now: float
    ) -> None:
        memory = self.ledger.port(f"{nic}/{number}")
        was_down_since = memory.down_since
        step = observe(memory, up, counters.get("link_downed"), now)
        if memory.down_since is not None and was_down_since is None:
            self._log.warning("NIC port down", nic=nic, port=number, flaps=memory.flaps)
        elif step.closed_outage is not None:
            self._log.info(
                "NIC port up again",
                nic=nic,
                port=number,
                outage_seconds=round(step.closed_outage, 3),
            )
        elif step.flaps:
            # Down and up again between two polls: only link_downed saw it.
            self._log.warning("NIC port flapped", nic=nic, port=number, flaps=memory.flaps)

    # -- evidence ----------------------------------------------------------------

    def _settled(self, found: Scan, now: float) -> dict[str, tuple[str, float]]:
        """Address -> (what is downtrained, since) for links downtrained at two polls running."""
        current: dict[str, tuple[str, float, bool]] = {}
        for address, link in found.links.items():
            what = link.downtrained()
            if not what:
                continue
            before = self._downtrained.get(address)
            if before is not None and before[0] == what:
                current[address] = (what, before[1], True)  # dated from its first sight
                if not before[2]:
                    self._log.warning(
                        "PCIe link downtrained",
                        pci_bus_id=address,
                        what=what,
                        link=rules.describe(link),
                    )
            else:
                current[address] = (what, now, False)
        for address, (_, _, settled) in self._downtrained.items():
            if settled and address not in current:
                self._log.info("PCIe link trained at its maximum again", pci_bus_id=address)
        self._downtrained = current
        return {a: (w, since) for a, (w, since, settled) in current.items() if settled}

    def _post(self, found: Scan, present: Mapping[str, Nic], now: float) -> None:
        """Post every GPU's fabric evidence at once (what is no longer true is withdrawn)."""
        expires = now + self.stale_after
        items: dict[str, list[Evidence]] = {}
        settled = self._settled(found, now)
        for address, vendor in (found.accelerators or {}).items():
            if address in settled:
                what, since = settled[address]
                link = found.links[address]
                items.setdefault(address, []).append(
                    rules.gpu_downtrained(link, what, vendor, since, expires)
                )
            switch = found.links[address].pcie_switch if address in found.links else ""
            if switch in settled:
                what, since = settled[switch]
                items.setdefault(address, []).append(
                    rules.switch_downtrained(found.links[switch], what, since, expires)
                )
        for name, memory in self.ledger.nics.items():
            evidence: list[Evidence] = []
            if not memory.present:
                evidence.append(
                    rules.nic_missing(name, memory.pci_bus_id, memory.missing_since, expires)
                )
            else:
                nic = present[name]
                if nic.pci_bus_id in settled:
                    what, since = settled[nic.pci_bus_id]
                    link = found.links[nic.pci_bus_id]
                    evidence.append(rules.nic_downtrained(name, link, what, since, expires))
                for port in nic.ports:
                    down_since = self.ledger.port(f"{name}/{port.number}").down_since
                    if down_since is not None:
                        evidence.append(
                            rules.nic_port_down(name, str(port.number), down_since, expires)
                        )
            for gpu in memory.served:
                items.setdefault(gpu, []).extend(evidence)
        self.board.replace(self.name, {k: v for k, v in items.items() if v})
