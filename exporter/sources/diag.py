"""Diagnostic verdicts from a watched directory: their families, and their evidence on the board.

Each poll lists ``sources.diag.path`` (a directory that does not exist is no result,
never an error: with ``enabled: auto``, the default, the source is then unavailable
here and looks again every minute), reads each new or changed ``*.json`` file once
(the parsed run is kept by the file's identity, so an unchanged file costs one
``lstat``), and parses it with the version-pinned parsers of :mod:`exporter.diag`.
Every file version is counted once, by its suite and result or by why it was refused.

A run's results are matched to the exporter's own devices (``accel_device_info`` of
the device sources, read from the store): by UUID or PCI bus id where the run names
the device so (Health Validation's entities), by serial number where the run gives
one and one device has it, else by the suite's device number (DCGM's GPU id and AMD's
GPU index are the device label of nvml and amdsmi), within the run's vendor. A result
about the node (Health Validation's own verdict, its node checks) is exported with
device and uuid "" and is no evidence about any device. For
each suite and device the newest run that tested the device (a Health Validation
run tests every device of the node) counts, until it is
older than the health window (``health.event_window``, from the file's modification
time, or now where that is ahead of the clock; a file dated more than 5 minutes ahead
is refused, ``future_mtime``, until its time comes). Its failed and warned tests
become :class:`~exporter.evidence.Evidence`
(source ``diag``, reasons ``diag_failed`` and ``diag_warning``, by
:mod:`exporter.diag.advice`), posted to the board every poll and expiring with the
run, so the device's verdict and recommended action follow at its source's next poll.

The parsing and the matching run on a thread of its own
(:class:`~exporter.sources.base.BlockingCall`): a hung filesystem makes this source
time out, nothing else, and the event loop never waits for the matching.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporter import actions, log
from exporter.catalog.device import INFO_LABELS
from exporter.config.diag import DiagSourceConfig
from exporter.diag import advice, files, formats
from exporter.diag.model import (
    ACCEPTED,
    EXPIRED,
    FUTURE_MTIME,
    FUTURE_SLACK,
    RESULTS,
    RUNTIME_ERROR,
    SCHEMA_DRIFT,
    TOO_MANY_FILES,
    DeviceResult,
    DiagError,
    Run,
)
from exporter.errors import SourceError, SourceUnavailable
from exporter.evidence import BOARD, Evidence, EvidenceBoard, device_key
from exporter.family_names import (
    ACCEL_DEVICE_INFO,
    ACCEL_DIAG_DEVICE_RUN_TIMESTAMP_SECONDS,
    ACCEL_DIAG_DIRECTORY_PRESENT,
    ACCEL_DIAG_FILES_REJECTED_TOTAL,
    ACCEL_DIAG_FILES_TOTAL,
    ACCEL_DIAG_RUN_INFO,
    ACCEL_DIAG_RUN_TIMESTAMP_SECONDS,
    ACCEL_DIAG_SCHEMA_DRIFT_INFO,
    ACCEL_DIAG_TEST_INFO,
    ACCEL_DIAG_TEST_RESULT,
    ACCEL_DIAG_UNMATCHED_RESULTS,
)
from exporter.model import Reading
from exporter.sources.base import BlockingCall, Source, StoreReader
from exporter.verdict import RANK

EVIDENCE_SOURCE = "diag"
# At most this many tests of one suite are exported per device (the newest run's,
# sorted by name): a file cannot grow the exposition without bound.
MAX_TESTS = 64
# Serial numbers that name no GPU (what the vendors write for none).
_NO_SERIAL = frozenset({"", "N/A", "<<<NOT_SUPPORTED>>>", "Not Supported"})


@dataclass(frozen=True)
class Device:
    """One device the device sources list: what a result is matched on, and its keys."""

    vendor: str
    device: str
    uuid: str
    pci_bus_id: str
    serial: str
    # A partition of a GPU (AMD CPX, ...): its index within the GPU ("" for a whole GPU).
    partition: str = ""


@dataclass(frozen=True)
class Parsed:
    """What one version of one file gave: a run (with its time) or the refusal."""

    run: Run | None
    error: DiagError | None
    mtime: float


@dataclass
class Scan:
    """One poll's reading of the directory: every counted file's outcome, newest first."""

    present: bool
    parsed: list[tuple[str, Parsed]] = field(default_factory=list)


class DiagSource(Source):
    """Reads diagnostic result files; posts what they say about each device as evidence."""

    def __init__(
        self,
        name: str,
        config: DiagSourceConfig,
        *,
        window: float,
        board: EvidenceBoard = BOARD,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name, config)
        self.cfg = config
        self.window = window
        self.board = board
        self.wall = wall
        self._call = BlockingCall(name)
        self._store: StoreReader | None = None
        # file name -> (signature, what it gave): parsed once per version.
        self._cache: dict[str, tuple[tuple[int, int, int, int], Parsed]] = {}
        # (name, signature) of every file version counted (pruned to the directory's).
        self._counted: set[tuple[str, tuple[int, int, int, int]]] = set()
        self._files: Counter[tuple[str, str]] = Counter()
        self._rejected: Counter[str] = Counter()
        # The poll's thread adds to the counters while /status (the HTTP thread) reads them.
        self._lock = threading.Lock()
        self._removed = False
        self._present: bool | None = None
        # What the last poll posted: a replacement re-posts it (each item keeps its expiry).
        self._posted: dict[str, list[Evidence]] = {}
        self._log = log.get(component="diag", source=name, path=config.path)

    def fingerprint(self) -> tuple[object, ...]:
        """The section and the window: a reload that changes either builds a new source."""
        return (*super().fingerprint(), self.window)

    def adopt(self, old: Source) -> None:
        """Keep the counters, the parsed files and the evidence of the source this one replaces.

        The old one's evidence stayed on the board while it stopped (the device sources,
        still running, judge in between); posting it again here (each item with its own
        expiry) is the same evidence. A source of another directory replaces it at its
        first poll.
        """
        if isinstance(old, DiagSource) and old.cfg.path == self.cfg.path:
            self._cache, self._counted = old._cache, old._counted
            self._files, self._rejected, self._lock = old._files, old._rejected, old._lock
            self._present = old._present
            self._posted = old._posted
            self.board.replace(EVIDENCE_SOURCE, self._posted)

    def attach(self, store: StoreReader) -> None:
        """Keep the store: the device sources' inventory is what results are matched to."""
        self._store = store

    def status(self) -> dict[str, object]:
        """/status: the directory, whether it is there, the files counted so far."""
        with self._lock:
            files = sorted(self._files.items())
            rejected = sorted(self._rejected.items())
        return {
            "path": self.cfg.path,
            "present": bool(self._present),
            "files": {f"{suite}/{result}": n for (suite, result), n in files},
            "rejected": dict(rejected),
        }

    async def close(self) -> None:
        """Nothing to release: the evidence stays (a reload's replacement keeps it).

        Withdrawn only when the source is removed (:meth:`removed`); otherwise each item
        expires with its run.
        """

    def removed(self) -> None:
        """A reload dropped the source: withdraw its evidence, a source gone vouches for nothing."""
        self._removed = True  # a poll still running on its thread posts nothing after this
        self.board.replace(EVIDENCE_SOURCE, {})
        self._posted = {}

    async def poll(self) -> Sequence[Reading]:
        """Read the directory, post the evidence, return the families."""
        now = self.wall()
        try:
            scan, readings = await self._call(self._read, now)
        except OSError as exc:
            # The directory exists but cannot be listed: the evidence already posted
            # runs out by itself; the counters stay true.
            raise SourceError("unreadable", f"{self.cfg.path}: {exc}", self._counters()) from None
        if scan.present != self._present:
            self._log.info("diag directory " + ("present" if scan.present else "absent"))
            self._present = scan.present
        if not scan.present and self.auto:
            # enabled: auto on a node without the directory: nothing to read here, not a
            # failure; the scheduler asks again (every minute) and finds it once made.
            raise SourceUnavailable(
                "directory_missing", f"{self.cfg.path} does not exist", readings
            )
        return readings

    # -- the directory (on the poll's thread) -------------------------------------------

    def _read(self, now: float) -> tuple[Scan, list[Reading]]:
        """Scan, then match and judge (all of it off the event loop: 256 files take ms)."""
        scan = self._scan(now)
        return scan, self._judge(scan, now)  # no directory: no evidence either

    def _scan(self, now: float) -> Scan:
        """List, read and parse what is new; count each file version once."""
        entries = files.listing(self.cfg.path)
        if entries is None:
            # What was counted stays counted: the same files back (a remount) are not new.
            self._cache.clear()
            return Scan(present=False)
        scan = Scan(present=True)
        seen: set[tuple[str, tuple[int, int, int, int]]] = set()
        for rank, entry in enumerate(entries):
            key = (entry.name, entry.signature)
            seen.add(key)
            if now - entry.mtime > self.window:
                self._count(key, rejected=EXPIRED)
                continue
            if entry.mtime - now > FUTURE_SLACK:
                self._count(key, rejected=FUTURE_MTIME)
                continue
            if rank >= self.cfg.max_files:
                self._count(key, rejected=TOO_MANY_FILES)
                continue
            cached = self._cache.get(entry.name)
            if cached is None or cached[0] != entry.signature:
                cached = (entry.signature, self._parse(entry))
                self._cache[entry.name] = cached
            parsed = cached[1]
            self._count_parsed(key, parsed)
            # A writer's clock ahead of ours: the run is of now, never of a time to come
            # (it would outrank every later run and outlive the window).
            if parsed.mtime > now:
                parsed = dataclasses.replace(parsed, mtime=now)
            scan.parsed.append((entry.name, parsed))
        # Forget what left the directory (a file put back is a new version: counted again).
        names = {name for name, _ in seen}
        self._counted &= seen
        for name in [n for n in self._cache if n not in names]:
            del self._cache[name]
        return scan

    def _parse(self, entry: files.Entry) -> Parsed:
        try:
            data = files.read(self.cfg.path, entry.name, self.cfg.max_file_bytes)
            return Parsed(formats.parse(data), None, entry.mtime)
        except DiagError as exc:
            return Parsed(None, exc, entry.mtime)
        except Exception as exc:  # a parser's bug must not take the scrape: counted, logged
            self._log.error("diag file not parsed", file=entry.name, error=repr(exc))
            return Parsed(None, DiagError("unparseable", repr(exc)[:200]), entry.mtime)

    def _count_parsed(self, key: tuple[str, tuple[int, int, int, int]], parsed: Parsed) -> None:
        if parsed.run is not None:
            result = RUNTIME_ERROR if parsed.run.runtime_error else ACCEPTED
            self._count(key, suite=parsed.run.suite, result=result, run=parsed.run)
        elif parsed.error is not None and parsed.error.suite:
            self._count(key, suite=parsed.error.suite, result=parsed.error.reason, why=parsed.error)
        elif parsed.error is not None:
            self._count(key, rejected=parsed.error.reason, why=parsed.error)

    def _count(
        self,
        key: tuple[str, tuple[int, int, int, int]],
        *,
        suite: str = "",
        result: str = "",
        rejected: str = "",
        run: Run | None = None,
        why: DiagError | None = None,
    ) -> None:
        """Count a file version once, and log it once, with what became of it."""
        if key in self._counted:
            return
        self._counted.add(key)
        if rejected:
            with self._lock:
                self._rejected[rejected] += 1
            if rejected not in (EXPIRED, TOO_MANY_FILES):
                detail = why.detail if why else ""
                self._log.warning("diag file refused", file=key[0], reason=rejected, detail=detail)
            return
        with self._lock:
            self._files[(suite, result)] += 1
        if result == SCHEMA_DRIFT:
            self._log.warning(
                "diag file of an unpinned schema",
                file=key[0],
                suite=suite,
                version=why.version if why else "",
                detail=why.detail if why else "",
            )
        elif run is not None:
            self._log.info(
                "diag run read",
                file=key[0],
                suite=suite,
                version=run.version,
                results=len(run.results),
                failed=sum(1 for r in run.results if r.result == "fail"),
                runtime_error=run.runtime_error,
            )

    # -- devices, families, evidence ----------------------------------------------------

    def _devices(self) -> list[Device]:
        """The devices the device sources list now (none before their first poll)."""
        if self._store is None:
            return []
        out = []
        for r in self._store.view().readings(ACCEL_DEVICE_INFO):
            info = dict(zip(INFO_LABELS, r.labels, strict=False))
            out.append(
                Device(
                    info.get("vendor", ""),
                    info.get("device", ""),
                    info.get("uuid", ""),
                    info.get("pci_bus_id", ""),
                    info.get("serial", ""),
                    info.get("partition", ""),
                )
            )
        return out

    def _judge(self, scan: Scan, now: float) -> list[Reading]:
        devices = self._devices()
        # (suite, uuid) -> (run time, run, device, its results of that run): the newest wins.
        newest: dict[tuple[str, str], tuple[float, Run, Device, list[DeviceResult]]] = {}
        unmatched: Counter[str] = Counter()
        suites: dict[str, tuple[float, Run]] = {}
        drift: set[tuple[str, str]] = set()
        # suite -> (run time, vendor, the node's results of that run): the newest wins.
        nodes: dict[str, tuple[float, str, list[DeviceResult]]] = {}
        for _name, parsed in scan.parsed:
            run = parsed.run
            if run is None:
                if parsed.error is not None and parsed.error.reason == SCHEMA_DRIFT:
                    drift.add((parsed.error.suite, parsed.error.version))
                continue
            if run.runtime_error:
                continue
            if run.suite not in suites or suites[run.suite][0] < parsed.mtime:
                suites[run.suite] = (parsed.mtime, run)
            mine: dict[str, tuple[Device, list[DeviceResult]]] = {}
            if run.whole_node:  # a device it does not name passed it: this run is its newest
                for each in devices:
                    if each.vendor == run.vendor and each.uuid:
                        mine[each.uuid] = (each, [])
            node = [r for r in run.results if r.node]
            if node and (run.suite not in nodes or nodes[run.suite][0] < parsed.mtime):
                nodes[run.suite] = (parsed.mtime, run.vendor, node)
            for result in run.results:
                if result.node:
                    continue
                dev = _match(devices, run.vendor, result)
                if dev is None:
                    unmatched[run.suite] += 1
                    continue
                mine.setdefault(dev.uuid, (dev, []))[1].append(result)
            for uuid, (dev, found) in mine.items():
                held = newest.get((run.suite, uuid))
                if held is None or held[0] < parsed.mtime:
                    newest[(run.suite, uuid)] = (parsed.mtime, run, dev, found)
        out = self._counters()
        out.append(Reading(ACCEL_DIAG_DIRECTORY_PRESENT, (), 1.0 if scan.present else 0.0))
        for suite, (at, run) in sorted(suites.items()):
            out.append(Reading(ACCEL_DIAG_RUN_TIMESTAMP_SECONDS, (suite,), at))
            out.append(Reading(ACCEL_DIAG_RUN_INFO, (suite, run.version), 1.0))
        for suite, version in sorted(drift):
            out.append(Reading(ACCEL_DIAG_SCHEMA_DRIFT_INFO, (suite, version), 1.0))
        for suite in sorted(set(suites) | set(unmatched)):
            out.append(Reading(ACCEL_DIAG_UNMATCHED_RESULTS, (suite,), float(unmatched[suite])))
        # The node's own results (device and uuid ""): shown, never evidence about a device.
        for suite, (at, vendor, found) in sorted(nodes.items()):
            out.extend(_families(suite, Device(vendor, "", "", "", ""), at, found))
        evidence: dict[str, list[Evidence]] = {}
        for (suite, uuid), (at, _run, dev, found) in sorted(newest.items()):
            out.extend(_families(suite, dev, at, found))
            item = _evidence(suite, at, at + self.window, found)
            evidence.setdefault(uuid, []).extend(item)
        if not self._removed:
            self.board.replace(EVIDENCE_SOURCE, evidence)
            self._posted = evidence
        return out

    def _counters(self) -> list[Reading]:
        with self._lock:
            files = sorted(self._files.items())
            rejected = sorted(self._rejected.items())
        out = [Reading(ACCEL_DIAG_FILES_TOTAL, key, float(n)) for key, n in files]
        out += [
            Reading(ACCEL_DIAG_FILES_REJECTED_TOTAL, (reason,), float(n)) for reason, n in rejected
        ]
        return out


def _match(devices: Sequence[Device], vendor: str, result: DeviceResult) -> Device | None:
    """The device a result names: by UUID or bus id, else serial, else number.

    A UUID or PCI bus id is used where the suite gives one; a serial where one
    device has it; else the suite's device number, unless the run's serial and the
    device's are both known and differ (another GPU). The suites number physical
    GPUs: a partition (whose device label numbers the partitions) is never matched
    by number or bus id, so a partitioned GPU's results are only matched by serial
    number or the partition's own UUID.
    """
    mine = [d for d in devices if d.vendor == vendor and d.uuid]
    if result.uuid:
        by_uuid = [d for d in mine if d.uuid == result.uuid]
        return by_uuid[0] if len(by_uuid) == 1 else None
    if result.pci_bus_id:
        key = device_key(result.pci_bus_id)
        by_bus = [
            d for d in mine if d.pci_bus_id and device_key(d.pci_bus_id) == key and not d.partition
        ]
        return by_bus[0] if len(by_bus) == 1 else None
    if result.serial and result.serial not in _NO_SERIAL:
        by_serial = [d for d in mine if d.serial == result.serial]
        if len(by_serial) == 1:
            return by_serial[0]
    by_number = [d for d in mine if d.device == result.entity and not d.partition]
    if len(by_number) != 1:
        return None
    dev = by_number[0]
    # Both serials known and different: the run's GPU of that number is another one.
    known = result.serial not in _NO_SERIAL and dev.serial not in _NO_SERIAL
    return None if known and dev.serial != result.serial else dev


def _families(suite: str, dev: Device, at: float, found: Sequence[DeviceResult]) -> list[Reading]:
    """One device's result families for one suite's run."""
    ident = (dev.device, dev.uuid)
    out = [Reading(ACCEL_DIAG_DEVICE_RUN_TIMESTAMP_SECONDS, (*ident, suite), at)]
    by_test: dict[str, DeviceResult] = {}
    for result in found:
        held = by_test.get(result.test)
        # A test named twice in a run (NVVS repeats): the worse result stands.
        if held is None or RESULTS.index(result.result) > RESULTS.index(held.result):
            by_test[result.test] = result
    info: set[tuple[str, ...]] = set()
    for test in sorted(by_test)[:MAX_TESTS]:
        result = by_test[test]
        for word in RESULTS:
            value = 1.0 if word == result.result else 0.0
            out.append(Reading(ACCEL_DIAG_TEST_RESULT, (*ident, suite, test, word), value))
        for issue in result.issues:
            info.add((*ident, suite, test, issue.code, issue.severity, issue.category))
    out.extend(Reading(ACCEL_DIAG_TEST_INFO, labels, 1.0) for labels in sorted(info))
    return out


def _evidence(suite: str, at: float, until: float, found: Sequence[DeviceResult]) -> list[Evidence]:
    """One suite's evidence about one device: an item per reason, the worst hit's advice."""
    hits: dict[str, list[advice.Hit]] = {}
    for result in found:
        hit = advice.judge(suite, result)
        if hit is not None:
            hits.setdefault(hit.reason, []).append(hit)
    out = []
    for reason, items in sorted(hits.items()):
        lead = max(items, key=lambda h: (RANK[h.state], actions.RANK[h.advice.action]))
        state = max((h.state for h in items), key=RANK.__getitem__)
        detail = "; ".join(dict.fromkeys(h.detail for h in items))
        out.append(Evidence(EVIDENCE_SOURCE, reason, state, lead.advice, at, until, detail))
    return out
