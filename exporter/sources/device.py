"""A vendor device backend seen from the daemon: a worker process behind a source.

The worker (``exporter.backends.<vendor>``) answers ``poll`` with per-device
status and readings. This class checks the answer against the inventory the
worker announced at bootstrap, adds the identity families (info, up, count),
and keeps slow fields (read every ``slow_interval``) between slow polls. When
the worker fails, every known device is exported ``up 0`` with the reason and
its identity stays visible, so alerts can still say which GPU is gone; its health
verdict is then unknown (the worker's trouble is no evidence about the device), with
the events the judge remembers for it (:mod:`exporter.health`). With
``expected_devices`` set, ``accel_devices_expected`` is exported in every state,
and a library that cannot load is a failure rather than "no such hardware here".
``accel_pci_devices`` (the vendor's accelerators on the PCI bus, from sysfs) is
exported in every state too: it is what the library should have found.

Device isolation (see :mod:`exporter.workers.runner`): a device whose call hung
or crashed the worker is *isolated*. It stays in the exported inventory, down
with reason ``hung`` (or ``crashed``), with the call and the time in
``accel_device_isolated_info`` and ``..._since_timestamp_seconds``; the worker
serves the others. The poll that caught it carries the others' last values
(they were fresh one poll ago and are not at fault); the next poll reads them
from the new worker; the others' verdicts are unknown meanwhile (not read), the
culprit's failed (``isolated``). While a worker starts, the last identity and state
stay exported, the verdicts unknown.

Before a worker's first inventory, what the workers have learnt so far (each
device identified before a bootstrap hung on another, see
``WorkerRunner.learnt``) is exported as identity alone: ``accel_device_info``,
no ``accel_device_up`` nor health (nothing is known yet of their state, and a 0
would count them down on every daemon start), not counted in ``accel_devices``.

Wire shapes (all JSON):

inventory  ``{"vendor": str, "devices": [{"device": str, "uuid": str, "info": {label: str},
                                          "index": int (the library's; default: position),
                                          "parent": str (the physical device: the GPU of a
                                          partition; default: its uuid)}]}``
poll args  ``{"slow": bool, "processes": bool, "events": bool,
              "ledger": {uuid: object} (only for a backend with a ledger store)}``
poll fault ``inventory_changed`` (the devices differ from the inventory): the
           worker is restarted at once and asked again
poll reply ``{"devices": [{"uuid": str, "up": bool, "reason": str}],
              "readings": {metric: [position, label, ..., number, ...]},
              "slow_readings": {...} (only when slow was asked),
              "ledger": {uuid: object} (optional: the advanced ledgers, kept by the daemon)}``

Readings are grouped per family, and the identity labels are not repeated:
each family's list holds its series one after another, each as the device's
position in the inventory (an int, standing for its ``device`` and ``uuid``
labels), then its other label values in catalog order, then the value. A row
is as wide as the family has labels, so ``accel_power_watts`` (device, uuid)
rows are ``[0, 312.5, 1, 298.0]`` and ``accel_clock_hertz`` (device, uuid,
clock) rows ``[0, "graphics", 1.98e9, 0, "sm", 1.98e9]``. Only device families
(labels starting with device, uuid) may appear; anything that does not fit
(an unknown family, a ragged list, a position outside the inventory, a label
that is not a string, a value that is not a finite number) is a ShapeError,
never a truncation.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from exporter import health, log
from exporter.backend_api.backend import INVENTORY_CHANGED
from exporter.backend_api.wire import ROW_WIDTH
from exporter.catalog.device import INFO_LABELS
from exporter.config.devices import DeviceSourceConfig
from exporter.config.health import HealthConfig
from exporter.errors import SourceError, SourcePending, SourceUnavailable, WorkerError
from exporter.family_names import (
    ACCEL_DEVICE_DOWN_REASON_INFO,
    ACCEL_DEVICE_INFO,
    ACCEL_DEVICE_ISOLATED_INFO,
    ACCEL_DEVICE_ISOLATED_SINCE_TIMESTAMP_SECONDS,
    ACCEL_DEVICE_UP,
    ACCEL_DEVICES,
    ACCEL_DEVICES_EXPECTED,
    ACCEL_EXPORTER_STATE_ERRORS_TOTAL,
    ACCEL_EXPORTER_WORKER_STUCK_PROCESSES,
    ACCEL_PCI_DEVICES,
)
from exporter.health_api import DeviceReport
from exporter.host import libsearch
from exporter.model import Reading, readings_of
from exporter.sources import device_domains, pci
from exporter.sources.base import Source
from exporter.sources.cper_ledger import LedgerStore
from exporter.sources.health_keeper import HealthKeeper
from exporter.sources.worker import WorkerSource
from exporter.verdict import DeviceHealth
from exporter.workers.isolation import DeviceFault, Fault, Probe
from exporter.workers.runner import FAULT_BUDGET_SECONDS

# Share of the poll deadline given to the worker call, so the runner's own
# deadline (which kills the worker with reason "timeout") fires first, with room
# left for naming and killing a stuck worker (at most a quarter of the deadline).
CALL_SHARE = 0.85
FAULT_SHARE = 0.25
# Families this source derives itself, never taken from a worker nor carried over.
IDENTITY = frozenset(
    {
        ACCEL_DEVICES,
        ACCEL_DEVICES_EXPECTED,
        ACCEL_DEVICE_INFO,
        ACCEL_DEVICE_UP,
        ACCEL_DEVICE_DOWN_REASON_INFO,
        ACCEL_DEVICE_ISOLATED_INFO,
        ACCEL_DEVICE_ISOLATED_SINCE_TIMESTAMP_SECONDS,
        # Named by the worker's slow readings, kept while the device is down
        # (exporter.sources.device_domains): identity from then on.
        device_domains.FAMILY,
    }
)
# Why a device is down while the worker a reload replaced is not answering yet.
RELOADING = "reloading"
# Why a device the poll did not read has an unknown verdict (DeviceHealth.unknown_why):
# the exporter's own trouble, never evidence about the device.
WORKER_RESTARTING = "worker restarting: {}"  # it died or hung (timeout, crashed, ...)
WORKER_DOWN = "worker down: {}"  # none serves (the library unavailable after a success)
WORKER_STARTING = "worker starting"

Key = tuple[str, str]


def _learnt_identity(text: str) -> dict[str, str]:
    """``key=value;...`` as a worker's breadcrumb records it (``uuid``, ``pci_bus_id``)."""
    return dict(part.split("=", 1) for part in text.split(";") if part.count("=") == 1)


def call_budget(timeout: float) -> float:
    """Seconds a worker call may take within a poll deadline of ``timeout`` seconds."""
    spare = min(FAULT_BUDGET_SECONDS, FAULT_SHARE * timeout)
    return max(0.05, timeout * CALL_SHARE - spare)


@dataclass(frozen=True)
class DeviceId:
    """Identity of one device as announced in the inventory."""

    device: str
    uuid: str
    info: tuple[tuple[str, str], ...]
    index: int = -1  # the library's index of the device (what a worker's isolation names)
    parent: str = ""  # the physical device it is part of (itself, unless partitioned)


class ShapeError(Exception):
    """A worker reply does not have the agreed shape."""


def parse_inventory(raw: Mapping[str, Any]) -> tuple[str, list[DeviceId]]:
    """Validate an inventory; ShapeError naming the first problem."""
    vendor = raw.get("vendor")
    devices = raw.get("devices")
    if not isinstance(vendor, str) or not isinstance(devices, list):
        raise ShapeError("inventory needs a vendor string and a devices list")
    out = []
    seen: set[str] = set()
    for i, item in enumerate(devices):
        if not isinstance(item, dict):
            raise ShapeError(f"inventory device {i} is not an object")
        device, uuid, info = item.get("device"), item.get("uuid"), item.get("info", {})
        if not isinstance(device, str) or not isinstance(uuid, str) or not isinstance(info, dict):
            raise ShapeError(f"inventory device {i} needs string device and uuid")
        if uuid in seen:
            raise ShapeError(f"inventory lists uuid {uuid} twice")
        seen.add(uuid)
        unknown = set(info) - set(INFO_LABELS)
        if unknown:
            raise ShapeError(f"inventory device {i} has unknown info labels {sorted(unknown)}")
        index = item.get("index", i)
        if type(index) is not int or index < 0:
            raise ShapeError(f"inventory device {i} has an index that is not a natural number")
        parent = item.get("parent", uuid)
        if not isinstance(parent, str):
            raise ShapeError(f"inventory device {i} has a parent that is not a string")
        labels = tuple((k, str(v)) for k, v in sorted(info.items()))
        out.append(DeviceId(device, uuid, labels, index, parent or uuid))
    return vendor, out


_INT, _FLOAT, _STR = frozenset({int}), frozenset({float}), frozenset({str})
_NUMBER = _INT | _FLOAT


def parse_readings(raw: Any, devices: Sequence[DeviceId], where: str) -> list[Reading]:
    """``{metric: [position, label..., number, ...]}`` -> readings (see the module docstring).

    ShapeError on anything malformed: an unknown or non-device family, rows not
    a whole number of rows wide, a position outside the inventory, a label that
    is not a string, a value that is not a finite number. Each family's rows
    are checked column by column, so a reply of hundreds of series costs a few
    passes in C rather than a Python loop over each item.
    """
    if not isinstance(raw, dict):
        raise ShapeError(f"{where} is not an object")
    identity_of = [(d.device, d.uuid) for d in devices]
    device_of = [d.device for d in devices]
    uuid_of = [d.uuid for d in devices]
    known = frozenset(range(len(devices)))
    out: list[Reading] = []
    for metric, rows in raw.items():
        width = ROW_WIDTH.get(metric)
        if width is None:
            raise ShapeError(f"{where}: {metric!r} is not a device family")
        if type(rows) is not list or len(rows) % width:
            raise ShapeError(f"{where}.{metric} is not a list of rows of {width}")
        positions = rows[0::width]
        # Types first: a list or dict there is unhashable for the set check, and the
        # type check also refuses True and 1.0, which the set check would take for 1.
        if not set(map(type, positions)) <= _INT or not set(positions) <= known:
            raise ShapeError(f"{where}.{metric} names a device outside the inventory")
        extras = []
        for k in range(1, width - 1):
            column = rows[k::width]
            if not set(map(type, column)) <= _STR:
                raise ShapeError(f"{where}.{metric} has a label that is not a string")
            extras.append(column)
        values = rows[width - 1 :: width]
        kinds = set(map(type, values))
        try:
            if kinds == _FLOAT:
                finite = all(map(math.isfinite, values))
            elif kinds <= _NUMBER:
                values = list(map(float, values))  # an int is finite unless it overflows here
                finite = kinds == _INT or all(map(math.isfinite, values))
            else:
                raise ShapeError(f"{where}.{metric} has a value that is not a number")
        except OverflowError:  # an integer beyond any double
            finite = False
        if not finite:
            raise ShapeError(f"{where}.{metric} has a value that is not finite")
        if extras:
            labels: Iterable[tuple[str, ...]] = zip(
                map(device_of.__getitem__, positions),
                map(uuid_of.__getitem__, positions),
                *extras,
                strict=True,  # equal by construction: the list is a whole number of rows
            )
        else:  # identity labels only: one shared tuple per device
            labels = map(identity_of.__getitem__, positions)
        out += readings_of(metric, labels, values)
    return out


class DeviceSource(WorkerSource):
    """Polls a device backend running in a worker process."""

    def __init__(
        self,
        name: str,
        config: DeviceSourceConfig,
        backend: str,
        *,
        backend_config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        vendor: str = "",
        library: libsearch.Library | None = None,
        precheck: Callable[[], tuple[str, str] | None] | None = None,
        ledger: LedgerStore | None = None,
        health: HealthConfig | None = None,
    ) -> None:
        super().__init__(
            name,
            config,
            backend,
            backend_config or {},
            bootstrap_timeout=config.bootstrap_timeout,
            env=env,
        )
        self.device_config = config
        self._log = log.get(source=name)
        # A library the binding loads by absolute path: found here (library_path, the
        # vendor's paths, the loader's search), and while it is nowhere no worker is
        # started, so a node without this vendor pays nothing, not a process a re-probe.
        self._library = library
        # The same for a binding with search rules of its own (Vendor.precheck).
        self._precheck = precheck
        self._started = False
        # The vendor label before the worker's inventory names it (the library may never load).
        self._default_vendor = vendor
        # What the worker has consumed of each device's record stream (AMD CPER):
        # passed in every poll, so a new worker never reads a record twice.
        self.ledger = ledger
        self._vendor = ""
        self._devices: list[DeviceId] = []
        self._inventory_raw: dict[str, Any] | None = None
        self._slow: list[Reading] = []
        self._next_slow = 0.0
        # The peer domain and baseboard each device last named (its actions' reach).
        self._domains = device_domains.DomainMemory()
        # The health verdict of each device, derived from every poll's readings; the
        # keeper holds the judge and its memory in health.state_dir (carried by adopt).
        self._health_config = health or HealthConfig()
        self._keeper = HealthKeeper(name, self._health_config)
        self._health = self._keeper.judge
        # The verdicts the last poll made (success, failure or pending): see verdicts().
        self._verdicts: tuple[DeviceHealth, ...] = ()
        # Identity of every device any inventory named, by library index: an isolated
        # device keeps the name it had.
        self._known: dict[int, DeviceId] = {}
        # Devices identified by a worker that has not answered yet (no inventory so far).
        self._learnt: dict[int, DeviceId] = {}
        # The last poll's outcome (kept while a worker starts), and its device values
        # and device states (carried for the others when one device is isolated).
        self._last: list[Reading] = []
        self._values: list[Reading] = []
        self._states: dict[tuple[str, str], str] = {}
        # How long the last answered poll took (None: none yet).
        self._poll_took: float | None = None
        self._pci: list[str] | None = None
        self._pci_problem = ""
        self._next_pci = 0.0
        self.runner.probe = Probe(
            "poll",
            {"slow": True, "processes": config.processes, "events": False},
            timeout=self._call_budget(),
        )

    def adopt(self, old: Source) -> None:
        """Take over from the source a reload replaces (its settings changed).

        The devices it isolated stay isolated under the names they had (when the
        worker settings allow, see WorkerRunner.adopt), and until the new worker
        answers its devices stay exported, down with reason ``reloading`` (no
        values, which would pass for fresh): a burst of reloads blanks no series.
        """
        if not isinstance(old, DeviceSource) or old.runner.backend != self.runner.backend:
            return
        # The judge and its memory file go on (one writer of the file in this process).
        self._keeper = self._keeper.take_over(old._keeper, self._health_config)
        self._health = self._keeper.judge
        self.runner.adopt(old.runner)
        for index, known in old._known.items():
            self._known.setdefault(index, known)
        # Replaced by the new worker's inventory at its first answer.
        self._vendor, self._devices = old._vendor, list(old._devices)
        self._domains = old._domains  # the replaced worker's devices are these devices
        down = {(d.device, d.uuid): RELOADING for d in self._devices}
        self._last = self._compose(down, (), unread=self._unread(RELOADING))

    def carried(self) -> Sequence[Reading]:
        """The replaced source's devices, down with reason ``reloading`` (see adopt)."""
        return self._last

    def fingerprint(self) -> tuple[Any, ...]:
        """The worker's settings and the health section (a changed one rebuilds, adopted)."""
        return (*super().fingerprint(), self._health_config)

    async def close(self) -> None:
        """Stop the worker; the health memory file is let go (unless a reload took it)."""
        try:
            await super().close()
        finally:
            self._keeper.close()

    def verdicts(self) -> tuple[DeviceHealth, ...]:
        """The health verdict of each device as the last poll left it (or ``adopt``).

        Made by every poll, with a result or not: a device its worker reported up or
        down, or that isolation named the culprit, is judged on that evidence; one the
        poll could not read (the worker down, restarting or starting, the source
        reloading) is unknown, with why. Devices only identified so far (no worker
        answered a poll yet) have none.
        """
        return self._verdicts

    def _call_budget(self) -> float:
        return call_budget(self.timeout)

    def _poll_needs(self) -> float:
        """What a poll of a just-started worker needs: twice the last one, else half the budget."""
        half = self._call_budget() / 2
        return half if self._poll_took is None else min(half, 2 * self._poll_took)

    def _cannot_start(self) -> tuple[str, str] | None:
        """(reason, detail) when no worker could serve here, so none is started; else None.

        Here: a library the binding loads by path and that is nowhere to be found (the
        worker's backend runs the same search). A subclass adds what else makes a
        worker pointless (TPU: no chip on the host).
        """
        if self._precheck is not None and (absent := self._precheck()) is not None:
            return absent
        if self._library is None:
            return None
        found = libsearch.find(self._library, self.runner.config.get("library_path") or "")
        return None if found.path else ("library_not_found", found.detail)

    async def start(self) -> None:
        """Start the worker, unless it certainly could not serve (then: at a later poll)."""
        if self._cannot_start() is None:
            await super().start()
            self._started = True

    async def wait_ready(self, timeout: float) -> None:
        """Wait for the worker's first bootstrap, if one was started."""
        if self._started:
            await super().wait_ready(timeout)

    def status(self) -> dict[str, Any]:
        """Worker state plus the devices known; isolated devices by name."""
        out = {**super().status(), "vendor": self._vendor, "devices": len(self._exported())}
        names = {d.index: d for d in self._exported()}
        for entry in out.get("isolated_devices", []):
            dev = names.get(entry["index"])
            if dev is not None:
                entry["device"], entry["uuid"] = dev.device, dev.uuid
        if self._inventory_raw is None and self._learnt:
            # A first bootstrap still under way: how far it got (see _learn).
            out["identified_so_far"] = len(self._learnt)
        out["health_state"] = self._keeper.describe()
        if self.ledger is not None:
            out["cper_state"] = self.ledger.describe()
        if self._pci is not None:
            out["pci_devices"] = len(self._pci)
        elif self._pci_problem:
            out["pci_problem"] = self._pci_problem
        return out

    def health_report(self, verdicts: Mapping[str, DeviceHealth]) -> list[DeviceReport]:
        """Each exported device with its verdict in ``verdicts`` (by uuid), for /v1/devices.

        ``verdicts`` are those of the source's snapshot in the store (the record every
        consumer reads); called from an HTTP thread.
        """
        vendor = self._vendor or self._default_vendor
        return [
            DeviceReport(
                vendor,
                dev.index,
                dev.device,
                dev.uuid,
                dict(dev.info).get("pci_bus_id", ""),
                verdicts.get(dev.uuid),
            )
            for dev in self._exported()
        ]

    # -- which devices are exported ----------------------------------------------

    def _isolated(self) -> list[tuple[DeviceId, Fault]]:
        faults = sorted(self.runner.faults.values(), key=lambda f: f.index)
        return [
            (self._known.get(f.index) or self._learnt.get(f.index) or self._unnamed(f), f)
            for f in faults
        ]

    def _learn(self) -> None:
        """Take in what the starting workers identified, before any inventory named them."""
        if self._inventory_raw is not None:
            return
        for index, text in self.runner.learnt().items():
            learnt = _learnt_identity(text)
            if learnt.get("uuid"):  # without it, no name the inventory will keep
                bus = learnt.get("pci_bus_id", "")
                info = (("pci_bus_id", bus),) if bus else ()
                self._learnt[index] = DeviceId(str(index), learnt["uuid"], info, index)

    def _learnt_only(self) -> list[DeviceId]:
        """Devices identified so far that neither an inventory nor an isolation names."""
        named = {d.index for d in self._devices} | set(self.runner.faults)
        return [d for i, d in sorted(self._learnt.items()) if i not in named]

    def _unnamed(self, fault: Fault) -> DeviceId:
        """Identity of a device isolated before any worker described it.

        What the worker had learnt before it hung (its breadcrumb), else the bus
        address the device must have: the library numbers devices in bus order,
        so when it numbers as many as the bus holds and every device it did
        describe sits at its own index on the bus, the index gives the address.
        """
        learnt = _learnt_identity(fault.identity)
        uuid = learnt.get("uuid") or f"unidentified-{fault.index}"
        bus = learnt.get("pci_bus_id", "") or self._bus_by_order(fault.index)
        info = (("pci_bus_id", bus),) if bus else ()
        return DeviceId(str(fault.index), uuid, info, fault.index)

    def _bus_by_order(self, index: int) -> str:
        bus_list = self._pci  # read once: /status calls this from an HTTP thread
        if bus_list is None:
            return ""
        faults = set(self.runner.faults)
        # Before a worker's inventory names them, the devices the starting worker
        # identified (with their addresses) stand for it.
        described = self._devices or list(self._learnt.values())
        named = {
            d.index: dict(d.info).get("pci_bus_id", "") for d in described if d.index not in faults
        }
        if len(bus_list) != len(named) + len(faults) or index >= len(bus_list):
            return ""
        for i, bus in named.items():
            if i >= len(bus_list) or pci.normalize_bus_id(bus) != bus_list[i]:
                return ""
        return bus_list[index]

    def _exported(self) -> list[DeviceId]:
        faults = self.runner.faults
        return [d for d in self._devices if d.index not in faults] + [
            d for d, _ in self._isolated()
        ]

    def _expected(self) -> list[Reading]:
        """``accel_devices_expected`` when configured, whatever state the worker is in."""
        expected = self.device_config.expected_devices
        vendor = self._vendor or self._default_vendor
        if expected is None or not vendor:
            return []
        return [Reading(ACCEL_DEVICES_EXPECTED, (vendor,), float(expected))]

    def _identity(self, *, unanswered: bool = False) -> list[Reading]:
        devices = self._exported()
        # Before any worker named the vendor (every device isolated at the first start).
        vendor = self._vendor or self._default_vendor
        out = []
        if not unanswered:
            # Counted once a poll answered: until then the count says the source is
            # still starting, as it always has (devices only learnt are never counted).
            out.append(Reading(ACCEL_DEVICES, (vendor,), float(len(devices))))
        out.extend(self._expected())
        for dev in [*devices, *self._learnt_only()]:
            info = dict(dev.info)
            info.update(vendor=vendor, device=dev.device, uuid=dev.uuid)
            out.append(Reading(ACCEL_DEVICE_INFO, tuple(info.get(k, "") for k in INFO_LABELS), 1.0))
            out.extend(self._domains.readings(dev.device, dev.uuid, info))
        return out

    def _compose(
        self,
        states: Mapping[Key, str],
        values: Iterable[Reading],
        *,
        unread: Mapping[Key, str] | None = None,
        unanswered: bool = False,
    ) -> list[Reading]:
        """Identity, each device's state ("" = up, else the reason it is down), values, verdicts.

        ``unread``: the devices this poll did not read, with why (their state in
        ``states`` is the exporter's, not theirs): their verdict is unknown.
        ``unanswered``: no worker has answered a poll yet; the inventory's devices are
        shown by identity alone (isolated ones with their state, which is known).
        """
        if not self._devices and not self.runner.faults and not self._learnt:
            self._verdicts = ()
            return self._expected()
        out = self._identity(unanswered=unanswered)
        faults = self.runner.faults
        for dev in [] if unanswered else self._devices:
            if dev.index in faults:
                continue
            key = (dev.device, dev.uuid)
            reason = states.get(key, "")
            out.append(Reading(ACCEL_DEVICE_UP, key, 0.0 if reason else 1.0))
            if reason:
                out.append(Reading(ACCEL_DEVICE_DOWN_REASON_INFO, (*key, reason), 1.0))
        for dev, fault in self._isolated():
            key = (dev.device, dev.uuid)
            out.append(Reading(ACCEL_DEVICE_UP, key, 0.0))
            out.append(Reading(ACCEL_DEVICE_DOWN_REASON_INFO, (*key, fault.reason), 1.0))
            out.append(Reading(ACCEL_DEVICE_ISOLATED_INFO, (*key, fault.reason, fault.call), 1.0))
            out.append(Reading(ACCEL_DEVICE_ISOLATED_SINCE_TIMESTAMP_SECONDS, key, fault.since))
        out.extend(values)
        return self._judged(out, unread or {})

    def _judged(self, readings: list[Reading], unread: Mapping[Key, str]) -> list[Reading]:
        """``readings`` and the health families of their verdicts (kept for verdicts())."""
        self._verdicts = self._health.judge(readings, cast(Mapping[tuple[str, ...], str], unread))
        return [*readings, *health.readings(self._verdicts)]

    def _unread(self, why: str) -> dict[Key, str]:
        """Every inventory device with ``why``, but isolated ones (judged on their isolation)."""
        faults = self.runner.faults
        return {(d.device, d.uuid): why for d in self._devices if d.index not in faults}

    def _all_down(self, reason: str, why: str) -> list[Reading]:
        """Every device down with ``reason``: the worker's trouble, their verdicts unknown."""
        states = {(d.device, d.uuid): reason for d in self._devices}
        out = self._compose(states, (), unread=self._unread(why))
        self._last = out
        return out

    # -- polls ---------------------------------------------------------------------

    async def poll(self) -> Sequence[Reading]:
        """One poll, the judge's memory recalled before it and kept after it (health_keeper).

        Before: the memory file read at the first poll (so the first verdict after a
        restart carries what was remembered) and the clear requests taken. After,
        whatever the poll's outcome: the memory written if it changed, in a thread.
        """
        async with self._keeper.around_poll():
            return await self._poll_all()

    async def _poll_all(self) -> Sequence[Reading]:
        """One poll plus the bus count; a worker whose devices changed is replaced, asked again."""
        deadline = time.monotonic() + self._call_budget()  # the bus scan comes out of it too
        self._verdicts = ()  # until this poll judges (a poll cut off judged nothing)
        extra = self._own_readings(await self._scan_pci())
        try:
            if not self._started:
                why = self._cannot_start()
                if why is not None:
                    # As when a worker finds no library: a failure on a node declared to
                    # have these accelerators, else "no such hardware here".
                    declared = self.device_config.expected_devices is not None
                    kind = SourceError if declared else SourceUnavailable
                    raise kind(*why, self._expected())
                await super().start()
                self._started = True
            return [*await self._poll_device(deadline), *extra]
        except SourceError as exc:
            if not isinstance(exc, SourcePending) or self._anything_known():
                exc.readings = (*exc.readings, *extra)
            raise

    def _anything_known(self) -> bool:
        """Whether any device is known: identified, isolated or in an inventory."""
        return bool(
            self._devices or self._learnt or self.runner.faults or self._inventory_raw is not None
        )

    async def _poll_device(self, deadline: float) -> Sequence[Reading]:
        try:
            return await self._poll_once(deadline)
        except WorkerError as exc:
            if exc.reason != INVENTORY_CHANGED:
                raise
            # Only a new bootstrap describes the changed devices (a GPU identified
            # at last, a MIG mode switched): restart now, ask within the deadline.
            await self.runner.restart(exc.reason, exc.detail)
        return await self._poll_once(deadline)

    def _adopt(self, inventory: dict[str, Any]) -> None:
        if inventory is self._inventory_raw:
            return
        self._vendor, self._devices = parse_inventory(inventory)
        self._inventory_raw = inventory
        self._known.update((d.index, d) for d in self._devices)
        # An isolated device keeps the name it was shown by while the bootstrap ran.
        for index in self.runner.faults:
            if index in self._learnt:
                self._known.setdefault(index, self._learnt[index])
        self._learnt = {}
        self._slow = []
        self._next_slow = 0.0
        self._domains.keep(d.uuid for d in self._devices)

    async def _poll_once(self, deadline: float) -> Sequence[Reading]:
        """Wait for the worker if it is starting, ask it, check the answer."""
        try:
            was_ready = self.runner.is_ready
            inventory = await self.runner.ready(timeout=max(0.0, deadline - time.monotonic()))
            self._adopt(inventory)
            if not was_ready and deadline - time.monotonic() < self._poll_needs():
                # The worker came up late in this poll: what is left of the deadline may
                # not cover a poll of every device (64 partitions), and a missed one
                # kills the new worker. Asked again in a moment, with a whole deadline.
                raise SourcePending("starting", "the worker has just started")
            slow = time.monotonic() >= self._next_slow
            args: dict[str, Any] = {
                "slow": slow,
                "processes": self.device_config.processes,
                "events": self.device_config.events,
            }
            if self.ledger is not None:
                args["ledger"] = self.ledger.ledgers
            asked = time.monotonic()
            reply = await self.runner.call(
                "poll",
                args,
                timeout=max(0.05, deadline - time.monotonic()),
                # Measured against the whole budget: a call left with little of it (the
                # worker was starting) must not get a slow device blamed for hanging.
                blame_after=self._call_budget() / 2,
            )
            self._poll_took = time.monotonic() - asked
            states, values = self._check_reply(reply, slow)
            await self._keep_ledger(reply)
        except ShapeError as exc:
            await self.runner.invalidate("protocol_error", str(exc))
            why = WORKER_RESTARTING.format("protocol_error")
            raise SourceError(
                "protocol_error", str(exc), self._all_down("protocol_error", why)
            ) from None
        except SourcePending as exc:
            raise self._while_starting(exc) from None
        except SourceUnavailable as exc:
            if self.device_config.expected_devices is not None:
                # The node is declared to have accelerators: a missing library or driver
                # is a fault to alert on, not a machine without this vendor's hardware.
                down = self._all_down(exc.reason, WORKER_DOWN.format(exc.reason))
                raise SourceError(exc.reason, exc.detail, down) from None
            # Devices seen before stay visible, down with the reason (an unavailable
            # library after a success is a failure: the scheduler decides).
            down = self._all_down(exc.reason, WORKER_DOWN.format(exc.reason))
            raise SourceUnavailable(exc.reason, exc.detail, down, exc.retry_in) from None
        except DeviceFault as exc:
            raise self._carried_over(exc) from None
        except WorkerError as exc:
            self._learn()
            down = self._all_down(exc.reason, WORKER_RESTARTING.format(exc.reason))
            raise type(exc)(exc.reason, exc.detail, down) from None
        if slow:
            self._next_slow = time.monotonic() + self.device_config.slow_interval
        self._states, self._values = states, values
        self._last = self._compose(states, values)
        return self._last

    def _while_starting(self, exc: SourcePending) -> SourcePending:
        """What a poll shows while a new worker starts (``exc``: why it is pending).

        Which devices there are and their state stay shown until it answers; their
        values do not (they would pass for fresh). Before any result, what is known:
        the devices isolated so far, if any, and those identified so far (identity
        alone). ``exc`` itself when nothing is known: the source stays "not polled yet".
        """
        self._learn()
        if not self._anything_known():
            return exc
        kept = [r for r in self._last if r.metric in IDENTITY]
        if kept and self._devices:
            # Not read while it starts: unknown, with what is remembered of each.
            why = (
                WORKER_STARTING if exc.reason == "starting" else f"{WORKER_STARTING}: {exc.reason}"
            )
            known = self._judged(kept, self._unread(why))
        else:
            # No result yet: the devices are known, their state is not (a 0 would
            # count every device down on each daemon start); no verdict either.
            known = self._compose({}, (), unanswered=True)
        return SourcePending(exc.reason, exc.detail, known)

    def _carried_over(self, exc: DeviceFault) -> WorkerError:
        """What a poll shows when a device's fault restarts the worker without it.

        The culprit is isolated and a worker without it is starting: the others are
        not at fault, and what they said one poll ago stays until it answers.
        """
        isolated = {(d.device, d.uuid) for d, _ in self._isolated()}
        values = [r for r in self._values if r.labels[:2] not in isolated]
        self._values = []  # carried once: a second fault in a row has nothing fresh to carry
        # Carried, not read: their verdicts are unknown until the new worker answers.
        unread = self._unread(WORKER_RESTARTING.format(exc.reason))
        self._last = self._compose(self._states, values, unread=unread)
        return WorkerError(exc.reason, exc.detail, self._last)

    def _check_reply(
        self, reply: Any, slow: bool
    ) -> tuple[dict[tuple[str, str], str], list[Reading]]:
        """Each device's state ("" = up, else why it is down) and the value readings."""
        if not isinstance(reply, dict):
            raise ShapeError("poll reply is not an object")
        devices = reply.get("devices")
        if not isinstance(devices, list):
            raise ShapeError("poll reply has no devices list")
        if len(devices) != len(self._devices):
            raise ShapeError(
                f"asked about {len(self._devices)} devices, the worker answered for {len(devices)}"
            )
        known = {dev.uuid: dev for dev in self._devices}
        states: dict[tuple[str, str], str] = {}
        for i, item in enumerate(devices):
            if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
                raise ShapeError(f"devices[{i}] needs a uuid")
            dev = known.get(item["uuid"])
            if dev is None or (dev.device, dev.uuid) in states:
                raise ShapeError(f"devices[{i}] uuid {item['uuid']!r} is not in the inventory")
            up = item.get("up") is True
            states[(dev.device, dev.uuid)] = "" if up else str(item.get("reason") or "error")
        values = parse_readings(reply.get("readings", {}), self._devices, "readings")
        if slow:
            slow_readings = parse_readings(
                reply.get("slow_readings", {}), self._devices, "slow_readings"
            )
            answered = [key for key, why in states.items() if not why]
            self._slow = self._domains.learn(slow_readings, answered)
        # Slow fields read before a device went down must not outlive it.
        values.extend(r for r in self._slow if not states.get((r.labels[0], r.labels[1])))
        return states, values

    async def _keep_ledger(self, reply: Mapping[str, Any]) -> None:
        """Adopt the worker's advanced ledgers, and persist them when they changed."""
        answer = reply.get("ledger")
        if self.ledger is None or answer is None:
            return
        if not isinstance(answer, dict):
            raise ShapeError("poll reply ledger is not an object")
        try:
            changed = self.ledger.update(answer, {d.uuid for d in self._devices})
        except ValueError as exc:
            raise ShapeError(str(exc)) from None
        if changed:
            await asyncio.to_thread(self.ledger.save)

    # -- the bus -----------------------------------------------------------------------

    async def _scan_pci(self) -> list[str] | None:
        """The vendor's accelerators on the PCI bus, read again every slow interval."""
        vendor = self._vendor or self._default_vendor
        if vendor not in pci.VENDOR_IDS or time.monotonic() < self._next_pci:
            return self._pci
        self._next_pci = time.monotonic() + self.device_config.slow_interval
        try:
            found: list[str] | None = await asyncio.wait_for(
                asyncio.to_thread(pci.accelerators, self.device_config.sys_path, vendor),
                timeout=max(0.05, FAULT_SHARE * self.timeout),
            )
            problem = ""
        except (pci.PciError, asyncio.TimeoutError) as exc:
            found, problem = None, str(exc) or "reading sysfs took too long"
        if problem != self._pci_problem:
            if problem:
                self._log.warning("PCI device count unavailable", detail=problem)
            else:
                self._log.info("PCI device count available again")
            self._pci_problem = problem
        self._pci = found
        return found

    def _own_readings(self, bus: list[str] | None) -> list[Reading]:
        """The bus count and the stuck worker count, exported whatever the worker does."""
        out = []
        vendor = self._vendor or self._default_vendor
        if bus is not None:
            out.append(Reading(ACCEL_PCI_DEVICES, (vendor,), float(len(bus))))
        stuck = self.runner.stuck_processes()
        if stuck or self._known:  # once a worker ran here; a node without the vendor has none
            out.append(Reading(ACCEL_EXPORTER_WORKER_STUCK_PROCESSES, (self.name,), float(stuck)))
        errors = dict(self._keeper.errors)  # the health memory's and the CPER ledger's files
        if self.ledger is not None:
            for reason, count in self.ledger.errors.items():
                errors[reason] = errors.get(reason, 0) + count
        for reason, count in sorted(errors.items()):
            labels = (self.name, reason)
            out.append(Reading(ACCEL_EXPORTER_STATE_ERRORS_TOTAL, labels, float(count)))
        return out
