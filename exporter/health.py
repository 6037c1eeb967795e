"""A vendor-neutral health verdict per device, from the readings of one device source.

Readings in, one :class:`~exporter.verdict.DeviceHealth` record per device out: its
state (OpenTelemetry's ``hw.status`` states ok, degraded, failed, predicted_failure,
or unknown when the exporter cannot vouch for it), its reasons, the findings that ask
an action and the most disruptive such action. Every consumer reads these records;
the health families of /metrics are derived from them by :func:`readings`, the one
place they are spelled. The rules read only shared family names, so every backend
that fills them (NVIDIA, AMD, later ones) gets the same rules. The rules that compare
with the past ("grew", "was up", an XID within the window, a reset since) keep their
memory in :class:`HealthJudge`, one per source; :meth:`HealthJudge.remembered` and
:meth:`HealthJudge.recall` hand it to and from the state file
(:mod:`exporter.sources.health_keeper`), so it survives a daemon restart. What
clears it is evidence of repair only (a reset, a reboot, NVML's recovery action
back to none, the window passing, an operator's clear), each logged once with
what it cleared. Every rule is in docs/health.md.

The worst state found wins: failed, then degraded, then predicted_failure; every
reason found is listed, whatever its state. A device the poll did not read (its
worker down or starting, its source reloading) is unknown: only evidence about the
device itself makes it failed, never the exporter's own trouble.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exporter import action_file, actions, afids, health_rules, log, scope, trend
from exporter.catalog.device import INFO_LABELS
from exporter.config.health import HealthConfig
from exporter.evidence import BOARD, Evidence, EvidenceBoard
from exporter.family_names import (
    ACCEL_AMD_AFID_ERRORS_TOTAL,
    ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
    ACCEL_AMD_BAD_PAGE_THRESHOLD,
    ACCEL_AMD_BAD_PAGES,
    ACCEL_AMD_XGMI_LINK_UP,
    ACCEL_DEVICE_ACTION_REASON_INFO,
    ACCEL_DEVICE_ACTION_SCOPE_INFO,
    ACCEL_DEVICE_DOMAIN_INFO,
    ACCEL_DEVICE_DOWN_REASON_INFO,
    ACCEL_DEVICE_HEALTH,
    ACCEL_DEVICE_HEALTH_REASON_INFO,
    ACCEL_DEVICE_INFO,
    ACCEL_DEVICE_ISOLATED_INFO,
    ACCEL_DEVICE_RECOMMENDED_ACTION,
    ACCEL_DEVICE_RECOVERY_ACTION,
    ACCEL_DEVICE_UP,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_HEALTH_SIGNAL_DOWNGRADED_TOTAL,
    ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE,
    ACCEL_NVLINK_UP,
    ACCEL_REMAPPED_ROWS_FAILURE,
    ACCEL_REMAPPED_ROWS_PENDING,
    ACCEL_RETIRED_PAGES,
    ACCEL_RETIRED_PAGES_PENDING,
    ACCEL_SRAM_ECC_THRESHOLD_EXCEEDED,
    ACCEL_TEMPERATURE_MARGIN_CELSIUS,
    ACCEL_XID_LAST_TIMESTAMP_SECONDS,
)
from exporter.health_state.memory import DeviceMemory
from exporter.model import Reading
from exporter.vendors import VENDORS
from exporter.verdict import (
    DEGRADED,
    FAILED,
    OK,
    PREDICTED,
    RANK,
    STATES,
    UNKNOWN,
    DeviceHealth,
    Finding,
    Reason,
)

__all__ = [
    "DEGRADED",
    "FAILED",
    "OK",
    "PREDICTED",
    "STATES",
    "UNKNOWN",
    "DeviceHealth",
    "Finding",
    "HealthJudge",
    "Reason",
    "readings",
]

# Recovery actions that leave the GPU usable as it is (drain_p2p: only peer-to-peer
# traffic has to stop, so the GPU is degraded); any other asked action means it cannot be used.
HARMLESS_ACTIONS = frozenset({"none", "drain_p2p"})
# Below this many degrees of thermal margin the GPU is about to slow down for heat.
THERMAL_MARGIN_C = 5.0
# An uncorrectable ECC count that grew keeps the device degraded this long after.
ECC_GROWTH_HOLD_S = 3600.0
# Dynamic page retirement (pre-Ampere NVIDIA) holds at most 64 pages; from this many
# on, the GPU is close to needing replacement.
RETIRED_PAGES_NEAR_LIMIT = 60.0

# An XID or AFID counts this long after the event's own time (health.event_window).
EVENT_WINDOW_S = 3600.0
# The state an XID's action puts the device in; restart_app and none leave it ok (the
# application failed, not the GPU: NVIDIA's bucket RESTART_APP, e.g. Xid 13, 31, 94).
ACTION_STATES = {
    actions.DRAIN_P2P: DEGRADED,
    actions.RESET_DEVICE: FAILED,
    actions.REBOOT_NODE: FAILED,
    actions.SERVICE: FAILED,
    actions.INSPECT_HARDWARE: FAILED,
    actions.CONTACT_VENDOR: FAILED,
    actions.REPLACE_DEVICE: FAILED,
}
# Down reasons that only a reset or a driver reload ends: a device back from one was reset.
RESET_REASONS = frozenset({"gpu_lost", "reset_required", "driver_not_loaded", "driver_mismatch"})
# AMD: from this share of the driver's bad-page threshold on, the GPU is close to
# being declared bad (the NVIDIA 64-page limit does not apply: the threshold is per GPU).
BAD_PAGES_NEAR_SHARE = 0.9

# The reasons AMD's rules derive from AFIDs: remembered events, kept while a device is unknown.
AFID_REASONS = frozenset({"afid_fatal", "afid_recent", "afid_repeated"})
# The code suffix of the remembered event "this non-fatal AFID repeated": kept (and
# written to the memory file) as an AFID event of its own, so an escalation outlives a
# daemon restart and clears as its action (reboot_node) does.
REPEATED = "/repeated"
# CPER record severities, least to most severe (the worst one an AFID was read with).
_RECORD_RANK = {"non_fatal_corrected": 1, "non_fatal_uncorrected": 2, "unknown": 2, "fatal": 3}
# How far a reset reaches, by source (the vendor's; exporter.vendors).
RESET_SCOPES = {vendor.name: vendor.reset_scope for vendor in VENDORS}

# Families whose 0 for a link that was 1 means "a link went down".
LINK_UP_FAMILIES = (ACCEL_NVLINK_UP, ACCEL_AMD_XGMI_LINK_UP)
# accel_ecc_errors_total's type label of uncorrectable errors (one word on every vendor:
# the store refuses a value outside the catalog's enumeration).
UNCORRECTED = "uncorrected"

Identity = tuple[str, ...]


# family -> (reason, state, test of the value and labels): the rules that look at one
# reading alone.
Test = Callable[[float, tuple[str, ...]], bool]
_SINGLE: dict[str, tuple[str, str, Test]] = {
    ACCEL_DEVICE_UP: ("device_down", FAILED, lambda v, _l: v == 0),
    ACCEL_DEVICE_RECOVERY_ACTION: (
        "recovery_action",
        FAILED,
        lambda v, labels: v == 1 and labels[2] not in HARMLESS_ACTIONS,
    ),
    ACCEL_REMAPPED_ROWS_FAILURE: ("row_remap_failure", FAILED, lambda v, _l: v > 0),
    ACCEL_RETIRED_PAGES_PENDING: ("retired_pages_pending", FAILED, lambda v, _l: v > 0),
    ACCEL_REMAPPED_ROWS_PENDING: ("row_remap_pending", DEGRADED, lambda v, _l: v > 0),
    ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE: ("fabric_degraded", DEGRADED, lambda v, _l: v == 1),
    ACCEL_SRAM_ECC_THRESHOLD_EXCEEDED: (
        "sram_ecc_threshold",
        PREDICTED,
        lambda v, _l: v == 1,
    ),
    ACCEL_TEMPERATURE_MARGIN_CELSIUS: (
        "thermal_margin_low",
        DEGRADED,
        lambda v, _l: v < THERMAL_MARGIN_C,
    ),
}
# AMD families: AFIDs from CPER records, and the bad-page counts and threshold.
_AMD = frozenset(
    {
        ACCEL_AMD_AFID_ERRORS_TOTAL,
        ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
        ACCEL_AMD_BAD_PAGES,
        ACCEL_AMD_BAD_PAGE_THRESHOLD,
    }
)
_FAMILIES = frozenset(
    {
        *_SINGLE,
        *LINK_UP_FAMILIES,
        *_AMD,
        *health_rules.VALUE_RULES,
        *health_rules.GROWTH_RULES,
        ACCEL_RETIRED_PAGES,
        ACCEL_ECC_ERRORS_TOTAL,
        ACCEL_XID_LAST_TIMESTAMP_SECONDS,
        ACCEL_DEVICE_DOWN_REASON_INFO,
        ACCEL_DEVICE_ISOLATED_INFO,
        ACCEL_DEVICE_DOMAIN_INFO,
        ACCEL_DEVICE_INFO,
    }
)
# accel_device_info's label positions of the identity and the PCI address (the key of
# evidence posted by bus id: exporter.evidence).
_INFO_IDENT = (INFO_LABELS.index("device"), INFO_LABELS.index("uuid"))
_INFO_BUS = INFO_LABELS.index("pci_bus_id")
# A finding from evidence lists what every item of its reason saw, up to this long.
EVIDENCE_DETAIL_CHARS = 500


def _boot_time(path: str = "/proc/stat") -> float:
    """Unix time this host booted (btime); 0 where it cannot be read (nothing is cleared)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


BOOT_TIME = _boot_time()


@dataclass
class _Survey:
    """What one poll's readings say, sorted for the rules (HealthJudge._survey)."""

    # Each device's accel_device_up, unread devices included.
    up: dict[Identity, float]
    down_why: dict[Identity, set[str]] = field(default_factory=dict)
    # The reasons of each read device, filled in by the rules.
    devices: dict[Identity, dict[str, str]] = field(default_factory=dict)
    retired: dict[Identity, float] = field(default_factory=dict)
    amd: list[Reading] = field(default_factory=list)
    field_action: dict[Identity, str] = field(default_factory=dict)
    isolated: set[Identity] = field(default_factory=set)
    named: dict[Identity, dict[str, str]] = field(default_factory=dict)


def _advise(
    reasons: dict[str, str], findings: list[Finding], action: str, down_why: set[str] | None
) -> None:
    """The findings of the device's own recovery action and of each of its reasons."""
    if action == "drain_p2p":
        reasons.setdefault("recovery_action", DEGRADED)
    if action != "none":
        findings.append(_finding(f"recovery_action_{action}", actions.recovery_advice(action)))
    why_down = frozenset(down_why or ())
    for reason in sorted(reasons):
        advice = health_rules.reason_advice(reason, why_down)
        if advice is not None:
            findings.append(_finding(reason, advice))


@dataclass
class HealthJudge:
    """Derives the verdicts of one source's devices; remembers what the rules compare with."""

    clock: Callable[[], float] = time.monotonic
    # Unix time, to compare with the timestamps devices report (XIDs, AFIDs).
    wall: Callable[[], float] = time.time
    # How long an XID or AFID counts, measured from the event's own time.
    window: float = EVENT_WINDOW_S
    # Config overrides: code -> action (XIDs), code -> advice (AFIDs).
    xid_actions: Mapping[str, actions.Advice | str] = field(default_factory=dict)
    afid_actions: Mapping[str, actions.Advice | str] = field(default_factory=dict)
    # A site's own AFID table (health.afid_table): code -> advice; empty: the built-in one.
    afid_site: Mapping[str, actions.Advice] = field(default_factory=dict)
    # The configured table file; the one in use ("": the built-in table); the file's
    # (mtime, size, inode) last read, and the problem last logged with it ("": none).
    _site_wanted: str = ""
    _site_path: str = ""
    _site_seen: tuple[int, int, int] | None = None
    _site_problem: str = ""
    # Unix time this host booted: events older than it were resolved by the reboot.
    boot_time: Callable[[], float] = lambda: BOOT_TIME
    # (family, labels) of the links seen up at least once.
    _links_up: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    # labels of an uncorrectable ECC counter -> the last count seen.
    _ecc: dict[tuple[str, ...], float] = field(default_factory=dict)
    # identity -> when its uncorrectable count last grew.
    _ecc_grew: dict[Identity, float] = field(default_factory=dict)
    # (identity, kind, code) -> Unix time of the newest such event seen: kept across
    # worker restarts (a new worker counts XIDs from zero) until the window ends.
    _events: dict[tuple[Identity, str, str], float] = field(default_factory=dict)
    # Devices down for a reason only a reset or a driver reload ends, and when each
    # came back from one (the reset: what it resolves, recorded before, is cleared).
    _lost: set[Identity] = field(default_factory=set)
    _reset_at: dict[Identity, float] = field(default_factory=dict)
    # identity -> its verdict as the last poll left it.
    latest: dict[Identity, DeviceHealth] = field(default_factory=dict)
    # The source whose devices these are (log context).
    source: str = ""
    # identity -> the last NVML recovery action read, and when it last went back to none
    # (XIDs from before that a reboot resolves no longer count).
    _recovery: dict[Identity, str] = field(default_factory=dict)
    _recovered_at: dict[Identity, float] = field(default_factory=dict)
    # identity -> when an operator cleared it: no event from before counts.
    _cleared_at: dict[Identity, float] = field(default_factory=dict)
    # identity -> Unix time of the last poll that had it: one gone longer than the
    # window is forgotten (MIG and partition uuids come and go over a long uptime).
    _seen: dict[Identity, float] = field(default_factory=dict)
    # uuid -> the identity a recalled device had: renamed if a poll names it otherwise.
    _unplaced: dict[str, Identity] = field(default_factory=dict)
    # identity -> (monotonic, Unix) time of its last ECC growth, as last converted: the
    # file keeps Unix time, and converting anew each poll would drift with the clocks.
    _grew_wall: dict[Identity, tuple[float, float]] = field(default_factory=dict)
    # identity -> the domains it last named, by scope (exporter.scope): kept while the
    # device is unread, so that a remembered action still names its scope's devices.
    _domains: dict[Identity, dict[str, str]] = field(default_factory=dict)
    # identity -> AFID -> the count of its records last read (all severities), and the
    # CPER times of its records seen since (non-fatal AFIDs: the repeat rule).
    _afid_counts: dict[Identity, dict[str, float]] = field(default_factory=dict)
    _afid_hits: dict[Identity, dict[str, list[float]]] = field(default_factory=dict)
    # (identity, reason) of the AFID findings that are a repeat's escalation, this poll.
    _escalated: set[tuple[Identity, str]] = field(default_factory=set)
    # labels of a counter health_rules.GROWTH_RULES watches -> the last count seen (in
    # memory only: after a restart the first poll is the baseline; a growth already
    # seen is kept as its event).
    _counted: dict[tuple[str, ...], float] = field(default_factory=dict)
    # Error rates as trends (exporter.trend): degraded or predicted, never failed.
    trends: trend.DeviceTrends = field(default_factory=trend.DeviceTrends)
    # Evidence from outside the source (diagnostics, the fabric, trends): exporter.evidence.
    evidence: EvidenceBoard = BOARD
    # identity -> its PCI bus id as accel_device_info last said (kept while it is unread).
    _bus: dict[Identity, str] = field(default_factory=dict)

    @classmethod
    def configured(cls, config: HealthConfig, source: str = "") -> HealthJudge:
        """A judge with the configured window and action overrides."""
        judge = cls(source=source)
        judge.reconfigure(config)
        return judge

    def reconfigure(self, config: HealthConfig) -> None:
        """Take a reloaded config's window and overrides; the memory stays."""
        self.window = config.event_window
        self.xid_actions = config.xid_advice()
        self.afid_actions = config.afid_advice()
        self._site_wanted = config.afid_table
        self._site_seen = _file_signature(config.afid_table)
        self._load_site_table(config.afid_table)
        self.trends = self.trends.reconfigured(config.trend_rules, self.source)

    def _refresh_site_table(self) -> None:
        """Read the site's AFID table again if its file changed since it was last read.

        A reload whose config is otherwise the same keeps its sources (and this judge)
        as they are, so an edited table is picked up here, at the next poll: a stat
        per poll, the file read only when it changed.
        """
        if not self._site_wanted:
            return
        seen = _file_signature(self._site_wanted)
        if seen != self._site_seen:
            self._site_seen = seen
            self._load_site_table(self._site_wanted)

    def _load_site_table(self, path: str) -> None:
        """Take the site's AFID table (the config check read it too); keep the last good one.

        The file is read again here: between the config check and now it may have
        changed. A table that fails now keeps the one in use (logged once per problem).
        """
        if not path:
            if self._site_path:
                log.get(component="health", source=self.source).info(
                    "site AFID table dropped", path=self._site_path
                )
            self.afid_site, self._site_path, self._site_problem = {}, "", ""
            return
        try:
            table = action_file.load(path)
        except action_file.ActionFileError as exc:
            if str(exc) != self._site_problem:
                self._site_problem = str(exc)
                log.get(component="health", source=self.source).error(
                    "site AFID table not loaded; the last good one stays",
                    path=path,
                    problem=str(exc),
                    kept=self._site_path or "(the built-in table)",
                )
            return
        if path != self._site_path or self._site_problem:
            log.get(component="health", source=self.source).info(
                "site AFID table loaded", path=path, afids=len(table.advice)
            )
        self.afid_site, self._site_path, self._site_problem = table.advice, path, ""

    def judge(
        self, readings: Sequence[Reading], unread: Mapping[Identity, str] | None = None
    ) -> tuple[DeviceHealth, ...]:
        """The verdict of every device the readings report up or down, and of every unread one.

        ``unread`` names the devices this poll did not read, each with why (its worker
        down or restarting, a new worker starting, the source reloading): whatever the
        readings say of them is the exporter's own state, not evidence about the
        device, so it neither fails them nor teaches the memory anything. Their state
        is unknown; the events still remembered for them (XIDs, AFIDs in the window)
        are listed with the action they ask for, and so is the live evidence about
        them on the board (exporter.evidence: a diagnostic run, the fabric), which
        is about the device, not about the exporter's worker.

        Every device, read or not, gets one reason and one finding per live evidence
        reason, looked up by its uuid and the PCI bus id of its ``accel_device_info``.
        """
        unread = unread or {}
        now, wall = self.clock(), self.wall()
        self._refresh_site_table()
        seen = self._survey(readings, unread, now, wall)
        self._note(seen, wall)
        records = self._remember_afids(seen.amd, wall)
        found = self._events_found(wall, seen.field_action, records)
        amd_rules = _amd_reasons(seen.amd, seen.retired, found, self._escalated)
        trended = self.trends.judge(readings, now, wall, unread)
        out = []
        for ident, reasons in seen.devices.items():
            findings = found.get(ident, [])
            self._read_reasons(ident, reasons, findings, seen, amd_rules.get(ident), now)
            for t in trended.get(ident, ()):
                if RANK[t.state] > RANK[reasons.get(t.reason, OK)]:
                    reasons[t.reason] = t.state
                findings.append(t.finding)
            _advise(
                reasons, findings, seen.field_action.get(ident, "none"), seen.down_why.get(ident)
            )
            self._add_evidence(ident, reasons, findings, wall)
            out.append(self._record(ident, reasons, findings, wall))
        for ident, why in unread.items():
            # Only what is remembered of the device: the events still in their window
            # (AMD's rules turn AFIDs into reasons; no reading here to judge the rest).
            findings = found.get(ident, [])
            reasons = {
                reason: state
                for reason, state in amd_rules.get(ident, {}).items()
                if reason in AFID_REASONS
            }
            _event_reasons(reasons, findings)
            # Evidence from outside the source is about the device, not about the
            # exporter's worker: listed like a remembered event (the state stays unknown).
            self._add_evidence(ident, reasons, findings, wall)
            out.append(self._record(ident, reasons, findings, wall, why or "not read"))
        return self.trends.counted(self._scoped(out, seen.devices, seen.named))

    def _read_reasons(
        self,
        ident: Identity,
        reasons: dict[str, str],
        findings: list[Finding],
        seen: _Survey,
        amd_found: dict[str, str] | None,
        now: float,
    ) -> None:
        """Add to a read device's reasons what isolation, ECC growth, pages and events say."""
        if ident in seen.isolated:
            # The exporter's isolation named it the culprit of a hung or crashed call:
            # evidence about the device, not "the device reported itself down".
            reasons.pop("device_down", None)
            reasons["isolated"] = FAILED
        grew = self._ecc_grew.get(ident)
        if grew is not None and now - grew < ECC_GROWTH_HOLD_S:
            reasons["ecc_uncorrected_growth"] = DEGRADED
        if amd_found is not None:
            # AMD bad pages: pending ones are retired at the next reset and the
            # limit is the driver's threshold, so AMD's own rules replace the
            # NVIDIA ones the shared retired-page families would trigger.
            reasons.pop("retired_pages_pending", None)
            reasons.update(amd_found)
        elif seen.retired.get(ident, 0.0) >= RETIRED_PAGES_NEAR_LIMIT:
            reasons["retired_pages_near_limit"] = PREDICTED
        health_rules.settle(reasons)
        _event_reasons(reasons, findings)

    def _survey(
        self, readings: Sequence[Reading], unread: Mapping[Identity, str], now: float, wall: float
    ) -> _Survey:
        """One poll's readings sorted for the rules; the counters and events remembered."""
        # A poll has thousands of readings and the rules read a few families.
        picked = [r for r in readings if r.metric in _FAMILIES]
        # Whether each device is up, and why not, unread ones included: a bootstrap that
        # fails for driver_not_loaded downs every device, and when they answer again
        # that was a driver reload (what it resolves is cleared), not a verdict.
        seen = _Survey(
            up={
                r.labels: r.value
                for r in picked
                if r.metric == ACCEL_DEVICE_UP and isinstance(r.value, float)
            }
        )
        for r in picked:
            if r.metric == ACCEL_DEVICE_DOWN_REASON_INFO:
                seen.down_why.setdefault(r.labels[:2], set()).add(r.labels[2])
            elif r.metric == ACCEL_DEVICE_INFO and len(r.labels) > _INFO_BUS:
                self._bus[(r.labels[_INFO_IDENT[0]], r.labels[_INFO_IDENT[1]])] = r.labels[
                    _INFO_BUS
                ]
        if unread:
            picked = [r for r in picked if r.labels[:2] not in unread]
        seen.devices = {r.labels: {} for r in picked if r.metric == ACCEL_DEVICE_UP}
        for r in picked:
            if r.metric in _AMD:
                seen.amd.append(r)
            elif isinstance(r.value, float):  # device families are gauges and counters
                self._sort(r.metric, r.labels, r.value, seen, now, wall)
        return seen

    def _sort(
        self, metric: str, labels: Identity, value: float, seen: _Survey, now: float, wall: float
    ) -> None:
        """File one (non-AMD) reading where the rules look for it (see _survey)."""
        devices, events = seen.devices, self._events
        if metric == ACCEL_XID_LAST_TIMESTAMP_SECONDS:
            key = (labels[:2], "xid", labels[2])
            events[key] = max(events.get(key, 0.0), value)
            return
        if metric in (ACCEL_DEVICE_DOWN_REASON_INFO, ACCEL_DEVICE_INFO):
            return
        if metric == ACCEL_DEVICE_ISOLATED_INFO:
            seen.isolated.add(labels[:2])
            return
        if metric == ACCEL_DEVICE_DOMAIN_INFO:
            seen.named.setdefault(labels[:2], {})[labels[2]] = labels[3]
            return
        if metric == ACCEL_DEVICE_RECOVERY_ACTION and value == 1:
            seen.field_action[labels[:2]] = labels[2]
        if metric in health_rules.GROWTH_RULES:
            grown = health_rules.growth_reason(metric, labels)
            last = self._counted.get(labels)
            if last is None and metric in health_rules.COUNTED_FROM_ZERO:
                last = 0.0
            self._counted[labels] = value
            if grown and last is not None and value > last:
                key3 = (labels[:2], "ras", grown)
                events[key3] = max(events.get(key3, 0.0), wall)
            return
        if metric in health_rules.VALUE_RULES:
            found_at = devices.get(labels[:2])
            if found_at is not None:
                health_rules.apply_value_rules(metric, value, labels, found_at)
            return
        single = _SINGLE.get(metric)
        if single is not None:
            reason, state, test = single
            if test(value, labels):
                reasons = devices.get(labels[:2])
                if reasons is not None:
                    reasons[reason] = state
        elif metric == ACCEL_ECC_ERRORS_TOTAL:
            if labels[2] == UNCORRECTED:
                last = self._ecc.get(labels)
                if last is not None and value > last:
                    self._ecc_grew[labels[:2]] = now
                self._ecc[labels] = value
        elif metric == ACCEL_RETIRED_PAGES:
            seen.retired[labels[:2]] = seen.retired.get(labels[:2], 0.0) + value
        else:  # a link: down after having been up
            key2 = (metric, labels)
            if value == 1:
                self._links_up.add(key2)
            elif key2 in self._links_up and labels[:2] in devices:
                devices[labels[:2]]["link_down"] = DEGRADED

    def _add_evidence(
        self, ident: Identity, reasons: dict[str, str], findings: list[Finding], wall: float
    ) -> None:
        """The live evidence about the device: one reason and one finding per evidence reason.

        The reason takes the worst state any item of it gives, unless the same reason is
        already worse; the finding is the advice of its most disruptive item (then the
        worst state, then the newest), dated by the newest item, its detail every item's
        (the evidence's own, else its advice's). One finding per reason: two sources or
        two runs saying the same thing make one ``accel_device_action_reason_info`` series.
        """
        by_reason: dict[str, list[Evidence]] = {}
        for ev in self.evidence.for_device(ident[1], self._bus.get(ident, ""), wall):
            by_reason.setdefault(ev.reason, []).append(ev)
        for reason, items in sorted(by_reason.items()):
            state = max((ev.state for ev in items), key=RANK.__getitem__)
            had = reasons.get(reason)
            if had is None or RANK[state] > RANK[had]:
                reasons[reason] = state
            lead = max(
                items,
                key=lambda e: (actions.RANK[e.advice.action], RANK[e.state], e.observed_at),
            )
            details = [lead.detail or lead.advice.detail]
            details += [e.detail or e.advice.detail for e in items if e is not lead]
            detail = "; ".join(dict.fromkeys(d for d in details if d))[:EVIDENCE_DETAIL_CHARS]
            newest = max(ev.observed_at for ev in items)
            findings.append(_finding(reason, replace(lead.advice, detail=detail), at=newest))

    def _scoped(
        self,
        records: list[DeviceHealth],
        read: Mapping[Identity, object],
        named: dict[Identity, dict[str, str]],
    ) -> tuple[DeviceHealth, ...]:
        """The records with the devices their action's scope reaches (exporter.scope)."""
        for ident in read:
            self._domains[ident] = named.get(ident, {})
        domains: dict[Identity, dict[str, str]] = {
            (r.device, r.uuid): self._domains.get((r.device, r.uuid), {}) for r in records
        }
        out = []
        for record in records:
            if record.action != actions.NONE:
                ident = (record.device, record.uuid)
                reach = scope.members(record.scope, ident, domains)
                record = replace(record, scope_uuids=reach)
                self.latest[ident] = record
            out.append(record)
        return tuple(out)

    def _note(self, seen: _Survey, wall: float) -> None:
        """Take in what a poll says beyond its rules: resets, recovery, who is still here."""
        if self._unplaced:
            self._place(seen.up)
        self._note_resets(seen, wall)
        self._note_recovery(seen.field_action, wall)
        for ident in seen.up:
            self._seen[ident] = wall
        self._prune(wall)

    def _note_resets(self, seen: _Survey, wall: float) -> None:
        """Mark a device lost to a reset-only reason; one that is back was reset now."""
        field_action = seen.field_action
        for ident, value in seen.up.items():
            if value == 0 and seen.down_why.get(ident, set()) & RESET_REASONS:
                self._lost.add(ident)
            elif value == 1 and ident in self._lost:
                self._lost.discard(ident)
                cleared = [
                    f.reason
                    for f in self._current(ident, field_action, wall)
                    if f.action in actions.CLEARED_BY_RESET
                ]
                self._reset_at[ident] = wall
                log.get(component="health").info(
                    "device back after a reset", device=ident[0], uuid=ident[1]
                )
                self._log_cleared(ident, "reset", cleared)

    def _note_recovery(self, field_action: dict[Identity, str], wall: float) -> None:
        """NVML's recovery action back to none: the XIDs a reboot resolves are resolved."""
        for ident, name in field_action.items():
            last = self._recovery.get(ident, "")
            self._recovery[ident] = name
            if name != "none" or last in ("", "none"):
                continue
            cleared = [
                f.reason
                for f in self._current(ident, field_action, wall)
                if f.reason.startswith("xid_") and f.action in actions.CLEARED_BY_REBOOT
            ]
            self._recovered_at[ident] = wall
            self._log_cleared(ident, "recovery_action_none", cleared, was=last)

    def _event_finding(
        self,
        key: tuple[Identity, str, str],
        stamp: float,
        field_action: dict[Identity, str],
        records: Mapping[tuple[str, ...], str],
    ) -> Finding:
        """The finding one remembered XID or AFID makes, with the action it asks for.

        ``records``: (device, uuid, afid) -> the CPER record severity read this poll.
        An AFID's severity is the table's (exporter.afids.severity), the record's only
        where the table names none; the action comes from exporter.actions.afid_action.
        """
        ident, kind, code = key
        if kind == "xid":
            entry = actions.xid_action(int(code), self.xid_actions)
            advice = entry.advice
            if entry.code == actions.XID_RECOVERY_ACTION_CHANGED and ident in field_action:
                advice = actions.recovery_advice(field_action[ident])
            return _finding(
                f"xid_{code}",
                advice,
                immediate=entry.immediate,
                investigatory=entry.investigatory,
                at=stamp,
            )
        if kind == "ras":
            advice = health_rules.GROWTH_ADVICE.get(code) or actions.unknown_code(f"ras {code}")
            return _finding(code, advice, at=stamp)
        afid, _, tag = code.partition("/")
        severity = afids.severity(afid, records.get((*ident, afid), ""))
        advice = actions.afid_action(
            afid, self.afid_actions, self.afid_site, repeated=tag == REPEATED[1:]
        )
        return _finding(f"afid_{afid}", advice, at=stamp, severity=severity)

    def _remember_afids(
        self, readings: Iterable[Reading], wall: float
    ) -> dict[tuple[str, ...], str]:
        """Record each AFID's newest CPER time, and a non-fatal one's repeat; its severities.

        Returns (device, uuid, afid) -> the worst CPER record severity it was counted
        with (read only where the AFID table names no severity of its own). The repeat
        rule (docs/health.md): an uncorrected non-fatal AFID read in
        ``afids.REPEAT_RECORDS`` records within the window, counted as the distinct
        newest-record times its count grew with (the first sight of an AFID counts its
        newest record only: older ones may be from long ago), is remembered as an event of its own
        (``<afid>/repeated``), which escalates its finding.
        """
        events = self._events
        records: dict[tuple[str, ...], str] = {}
        totals: dict[tuple[Identity, str], float] = {}
        newest: dict[tuple[Identity, str], float] = {}
        for r in readings:
            if not isinstance(r.value, float):
                continue
            if r.metric == ACCEL_AMD_AFID_ERRORS_TOTAL:
                held = records.get(r.labels[:3], "")
                if r.value > 0 and _RECORD_RANK.get(r.labels[3], 0) >= _RECORD_RANK.get(held, 0):
                    records[r.labels[:3]] = r.labels[3]
                pair = (r.labels[:2], r.labels[2])
                totals[pair] = totals.get(pair, 0.0) + r.value
            elif r.metric == ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS:
                key = (r.labels[:2], "afid", r.labels[2])
                events[key] = max(events.get(key, 0.0), r.value)
                newest[(r.labels[:2], r.labels[2])] = r.value
        boot = self.boot_time()
        for (ident, afid), total in totals.items():
            if afids.severity(afid, records.get((*ident, afid), "")) != afids.NON_FATAL:
                continue
            stamp = newest.get((ident, afid))
            if stamp is None:
                continue
            counts = self._afid_counts.setdefault(ident, {})
            hits = self._afid_hits.setdefault(ident, {}).setdefault(afid, [])
            last = counts.get(afid)
            grew = last is None or total != last
            counts[afid] = total
            # A record, not a count: the count grows once per CPER section naming the
            # AFID, so growth stamped with a time already seen is the same record (or
            # the same burst, read at once): two sections of one burst are no pattern.
            if grew and stamp not in hits:
                hits.append(stamp)
            hits[:] = [
                at
                for at in hits[-afids.REPEAT_RECORDS :]
                if wall - at < self.window and self._counts(ident, "afid", at, actions.NONE, boot)
            ]
            if len(hits) >= afids.REPEAT_RECORDS:
                key = (ident, "afid", afid + REPEATED)
                if key not in events:
                    log.get(component="health", source=self.source).warning(
                        "AFID repeated: escalated",
                        device=ident[0],
                        uuid=ident[1],
                        afid=afid,
                        records=len(hits),
                    )
                events[key] = max(events.get(key, 0.0), max(hits))
        return records

    def _counts(self, ident: Identity, kind: str, stamp: float, action: str, boot: float) -> bool:
        """Whether an event still counts: no repair since it, of the kind that resolves it."""
        if stamp <= self._cleared_at.get(ident, 0.0):
            return False  # an operator cleared the device since
        if stamp < self._reset_at.get(ident, 0.0) and action in actions.CLEARED_BY_RESET:
            return False
        if (
            kind == "xid"
            and stamp < self._recovered_at.get(ident, 0.0)
            and action in actions.CLEARED_BY_REBOOT
        ):
            return False  # NVML's recovery action went back to none since
        return not (stamp < boot and action in actions.CLEARED_BY_REBOOT)

    def _current(
        self,
        ident: Identity,
        field_action: dict[Identity, str],
        wall: float,
        boot: float | None = None,
    ) -> list[Finding]:
        """The events of one device that count now (to say what a repair clears).

        ``boot``: the boot time to judge them by (default this boot's; 0 for a file from
        another boot, whose events this boot's rule would already hide).
        """
        boot = self.boot_time() if boot is None else boot
        out = []
        for key, stamp in self._events.items():
            if key[0] != ident or wall - stamp >= self.window:
                continue
            finding = self._event_finding(key, stamp, field_action, {})
            if self._counts(ident, key[1], stamp, finding.action, boot):
                out.append(finding)
        return out

    def _events_found(
        self,
        wall: float,
        field_action: dict[Identity, str],
        records: Mapping[tuple[str, ...], str],
    ) -> dict[Identity, list[Finding]]:
        """The XIDs and AFIDs that still count, by device; forgets those out of the window.

        A repeated non-fatal AFID's escalation replaces its first finding (one finding
        per AFID); which ones did is kept in ``_escalated`` for the AMD rules.
        """
        boot = self.boot_time()
        out: dict[Identity, list[Finding]] = {}
        expired: dict[Identity, list[str]] = {}
        self._escalated = set()
        for key, stamp in list(self._events.items()):
            ident, kind, _code = key
            finding = self._event_finding(key, stamp, field_action, records)
            counts = self._counts(ident, kind, stamp, finding.action, boot)
            if wall - stamp >= self.window:
                del self._events[key]
                if counts:
                    expired.setdefault(ident, []).append(finding.reason)
                continue
            if counts:
                out.setdefault(ident, []).append(finding)
            if counts and key[2].endswith(REPEATED):
                self._escalated.add((ident, finding.reason))
        for ident, reasons in expired.items():
            self._log_cleared(ident, "window", reasons)
        for ident, findings in out.items():
            by_reason: dict[str, Finding] = {}
            for finding in findings:
                held = by_reason.get(finding.reason)
                if held is None or actions.RANK[finding.action] > actions.RANK[held.action]:
                    by_reason[finding.reason] = finding
            out[ident] = sorted(by_reason.values(), key=lambda f: f.reason)
        return out

    def _log_cleared(self, ident: Identity, why: str, cleared: list[str], **context: Any) -> None:
        """One line for a repair that cleared something (nothing: no line)."""
        if cleared:
            log.get(component="health", source=self.source).info(
                "findings cleared",
                device=ident[0],
                uuid=ident[1],
                why=why,
                cleared=sorted(cleared),
                **context,
            )

    # -- the memory, beyond one poll -----------------------------------------------

    def _idents(self) -> set[Identity]:
        """Every device the memory holds anything of."""
        out = {key[0] for key in self._events}
        out.update(labels[:2] for labels in self._ecc)
        # Counters a growth rule watches may name a device no accel_device_up has.
        out.update(labels[:2] for labels in self._counted)
        out.update(labels[:2] for _family, labels in self._links_up)
        for held in (self._ecc_grew, self._lost, self._reset_at, self._recovery):
            out.update(held)
        for held2 in (self._recovered_at, self._cleared_at, self._seen, self.latest):
            out.update(held2)
        for held3 in (
            self._grew_wall,
            self._domains,
            self._bus,
            self._afid_counts,
            self._afid_hits,
        ):
            out.update(held3)
        out.update(self._unplaced.values())
        return out

    def _prune(self, wall: float) -> None:
        """Forget the devices no poll has had for longer than the window."""
        for ident in self._idents():
            seen = self._seen.setdefault(ident, wall)  # held but never seen: from now on
            if wall - seen > self.window:
                self._forget(ident)

    def _forget(self, ident: Identity) -> None:
        """Drop everything remembered of one device (gone from every poll for a window)."""
        events = sorted(f"{kind}_{code}" for (i, kind, code) in self._events if i == ident)
        self._rename(ident, None)
        # A recalled device no poll ever named: nothing left to place.
        if self._unplaced.get(ident[1]) == ident:
            del self._unplaced[ident[1]]
        log.get(component="health", source=self.source).info(
            "device forgotten",
            device=ident[0],
            uuid=ident[1],
            why="in no poll for longer than the event window",
            events=events,
        )

    def _rename(self, old: Identity, new: Identity | None) -> None:
        """Move what is remembered of ``old`` to ``new`` (None: drop it)."""

        def moved(labels: tuple[str, ...]) -> tuple[str, ...] | None:
            return None if new is None else (*new, *labels[2:])

        for key in [k for k in self._events if k[0] == old]:
            stamp = self._events.pop(key)
            if new is not None:
                self._events[(new, key[1], key[2])] = stamp
        for labels in [k for k in self._ecc if k[:2] == old]:
            count = self._ecc.pop(labels)
            target = moved(labels)
            if target is not None:
                self._ecc[target] = count
        for labels in [k for k in self._counted if k[:2] == old]:
            counted = self._counted.pop(labels)
            target = moved(labels)
            if target is not None:
                self._counted[target] = counted
        for family, labels in [k for k in self._links_up if k[1][:2] == old]:
            self._links_up.discard((family, labels))
            target = moved(labels)
            if target is not None:
                self._links_up.add((family, target))
        if old in self._lost:
            self._lost.discard(old)
            if new is not None:
                self._lost.add(new)
        maps: tuple[dict[Identity, Any], ...] = (
            self._ecc_grew,
            self._reset_at,
            self._recovery,
            self._recovered_at,
            self._cleared_at,
            self._seen,
            self._grew_wall,
            self._domains,
            self._bus,
            self._afid_counts,
            self._afid_hits,
            self.latest,
        )
        for held in maps:
            if old in held:
                value = held.pop(old)
                if new is not None:
                    held[new] = value

    def _place(self, up: dict[Identity, float]) -> None:
        """A recalled device a poll names by another device label: its memory follows it."""
        for ident in up:
            old = self._unplaced.pop(ident[1], None)
            if old is not None and old != ident:
                self._rename(old, ident)

    def known(self) -> dict[str, Identity]:
        """Every device the judge knows (seen, or recalled): uuid -> identity."""
        return {ident[1]: ident for ident in self._seen}

    def remembered(self) -> dict[str, DeviceMemory]:
        """The memory by device uuid, as the state file keeps it (see health_state.memory)."""
        now, wall = self.clock(), self.wall()
        out: dict[str, DeviceMemory] = {}

        def of(ident: Identity) -> DeviceMemory:
            found = out.get(ident[1])
            if found is None:
                found = out[ident[1]] = DeviceMemory(ident[0])
            return found

        for ident in self._seen:  # every device, so that its label names it (health clear)
            of(ident)
        for (ident, kind, code), stamp in self._events.items():
            of(ident).events[(kind, code)] = stamp
        for labels, count in self._ecc.items():
            of(labels[:2]).ecc[labels[2:]] = count
        for ident, grew in self._ecc_grew.items():
            converted = self._grew_wall.get(ident)
            if converted is None or converted[0] != grew:
                converted = self._grew_wall[ident] = (grew, max(0.0, wall - (now - grew)))
            of(ident).ecc_grew_at = converted[1]
        for family, labels in self._links_up:
            of(labels[:2]).links_up.add((family, labels[2:]))
        for ident in self._lost:
            of(ident).lost = True
        for ident, name in self._recovery.items():
            of(ident).recovery_action = name
        for ident, at in self._reset_at.items():
            of(ident).reset_at = at
        for ident, at in self._recovered_at.items():
            of(ident).recovered_at = at
        for ident, at in self._cleared_at.items():
            of(ident).cleared_at = at
        return out

    def recall(self, devices: Mapping[str, DeviceMemory], *, rebooted: bool) -> None:
        """Take in the memory a state file kept (before the first poll is judged).

        ``rebooted``: the file was written in another boot. Then the events a reboot
        resolves are cleared (``service`` and ``drain_p2p`` stay: a reboot repairs no
        hardware), and links seen up, ECC baselines and lost devices start afresh
        (a reboot resets volatile counters and every device).
        """
        now, wall = self.clock(), self.wall()
        for uuid, mem in devices.items():
            ident: Identity = (mem.device, uuid)
            self._seen[ident] = wall  # forgotten a window after the last poll that has it
            self._unplaced[uuid] = ident
            for (kind, code), stamp in mem.events.items():
                key = (ident, kind, code)
                self._events[key] = max(self._events.get(key, 0.0), stamp)
            if mem.ecc_grew_at:
                grew = now - (wall - mem.ecc_grew_at)
                self._ecc_grew[ident] = grew
                self._grew_wall[ident] = (grew, mem.ecc_grew_at)
            for key2, at in (
                (self._reset_at, mem.reset_at),
                (self._recovered_at, mem.recovered_at),
                (self._cleared_at, mem.cleared_at),
            ):
                if at:
                    key2[ident] = at
            if mem.recovery_action:
                self._recovery[ident] = mem.recovery_action
            if rebooted:
                cleared = [
                    f.reason
                    for f in self._current(ident, {}, wall, boot=0.0)
                    if f.action in actions.CLEARED_BY_REBOOT
                ]
                for key in [k for k in self._events if k[0] == ident]:
                    finding = self._event_finding(key, self._events[key], {}, {})
                    if finding.action in actions.CLEARED_BY_REBOOT:
                        del self._events[key]
                if mem.lost:
                    cleared.append("lost")
                self._log_cleared(ident, "reboot", cleared)
                continue
            for labels, count in mem.ecc.items():
                self._ecc[ident + labels] = count
            for family, labels in mem.links_up:
                self._links_up.add((family, ident + labels))
            if mem.lost:
                self._lost.add(ident)

    def clear(self, ident: Identity, *, by: str) -> list[str]:
        """An operator's clear of one device: what it cleared (logged, with who asked).

        Events from before now no longer count, the ECC growth hold ends, a device
        waiting for a reset waits no more. Link and ECC baselines stay: they are no
        finding, and a link still down afterwards is found down again.
        """
        now, wall = self.clock(), self.wall()
        cleared = [f.reason for f in self._current(ident, {}, wall)]
        grew = self._ecc_grew.pop(ident, None)
        self._grew_wall.pop(ident, None)
        if grew is not None and now - grew < ECC_GROWTH_HOLD_S:
            cleared.append("ecc_uncorrected_growth")
        if ident in self._lost:
            self._lost.discard(ident)
            cleared.append("lost")
        self._reset_at.pop(ident, None)
        self._recovered_at.pop(ident, None)
        self._cleared_at[ident] = wall
        log.get(component="health", source=self.source).info(
            "findings cleared",
            device=ident[0],
            uuid=ident[1],
            why="operator",
            cleared=sorted(cleared),
            by=by,
        )
        return sorted(cleared)

    def _record(
        self,
        ident: Identity,
        reasons: dict[str, str],
        findings: list[Finding],
        wall: float,
        unknown_why: str = "",
    ) -> DeviceHealth:
        """The device's verdict (kept as ``latest``): unknown when ``unknown_why`` says why."""
        findings = _hardware_scoped(findings, RESET_SCOPES.get(self.source, scope.DEVICE))
        worst = max(reasons.values(), key=RANK.__getitem__, default=OK)
        state = UNKNOWN if unknown_why else worst
        action = actions.worst([f.action for f in findings])
        asking = [f for f in findings if f.action == action and action != actions.NONE]
        # How far the device's trouble reaches: the widest of every finding that asks an
        # action, not only of the most disruptive one. A GPU to replace (device) whose
        # other AFID asks a reboot (node) takes the node down before the RMA.
        reach = scope.widest(f.scope for f in findings if f.action != actions.NONE)
        # The escalation, and how far it reaches, of the widest finding of that action.
        widest = scope.widest(f.scope for f in asking)
        lead = next((f for f in asking if f.scope == widest), None)
        before = self.latest.get(ident)
        since = before.since if before is not None and before.state == state else wall
        record = DeviceHealth(
            device=ident[0],
            uuid=ident[1],
            state=state,
            reasons=tuple(Reason(name, reasons[name]) for name in sorted(reasons)),
            findings=tuple(sorted(findings, key=lambda f: f.reason)),
            action=action,
            since=since,
            updated=wall,
            unknown_why=unknown_why,
            scope=reach,
            escalation=lead.escalation if lead else "",
            escalation_scope=lead.escalation_scope if lead and lead.escalation else "",
        )
        self.latest[ident] = record
        return record


def _finding(reason: str, advice: actions.Advice, **more: Any) -> Finding:
    """The finding of ``reason`` with what its table row (``advice``) says."""
    return Finding(
        reason,
        advice.action,
        scope=advice.scope,
        escalation=advice.escalation,
        detail=advice.detail,
        provenance=advice.provenance,
        reference=advice.reference,
        escalation_scope=advice.escalation_scope,
        **more,
    )


def _event_reasons(reasons: dict[str, str], findings: Iterable[Finding]) -> None:
    """Add the reason of each XID whose action leaves the device other than ok."""
    for finding in findings:
        xid_state = ACTION_STATES.get(finding.action)
        if xid_state is not None and finding.reason.startswith("xid_"):
            reasons[finding.reason] = xid_state
        grown = health_rules.GROWTH_STATES.get(finding.reason)
        if grown is not None:
            reasons[finding.reason] = grown


def _file_signature(path: str) -> tuple[int, int, int] | None:
    """(mtime, size, inode) of a file, to see it changed; None when absent or unnamed."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


# The actions on the hardware itself: each reaches at least every partition of its
# physical GPU (a partition is not reset, reseated or replaced alone; the partition scope
# of a GPU that is not partitioned is the GPU alone).
_HARDWARE_ACTIONS = (actions.RESET_DEVICE, actions.INSPECT_HARDWARE, actions.REPLACE_DEVICE)


def _hardware_scoped(findings: list[Finding], reset_reach: str) -> list[Finding]:
    """``findings`` with every hardware action reaching at least the partition.

    A ``reset_device`` one reaches at least ``reset_reach`` too (the vendor's reset scope).
    """
    out = []
    for f in findings:
        if f.action in _HARDWARE_ACTIONS:
            vendor = (reset_reach,) if f.action == actions.RESET_DEVICE else ()
            wide = scope.widest((f.scope, scope.PARTITION, *vendor))
            if wide != f.scope:
                f = replace(f, scope=wide)
        out.append(f)
    return out


def _afid_state(finding: Finding, escalated: bool) -> tuple[str, str] | None:
    """(reason, state) an AFID finding puts its device in; None: it leaves it ok.

    A repeat's escalation fails it (``afid_repeated``) when the escalated action takes
    the device out of service (an override naming no escalation, e.g. ``none``, leaves
    the repeat as it was: degraded); an action that takes the device
    out of service (ACTION_STATES: a fatal or boot-time AFID, one the decoder could not
    classify, an unknown one, an override) fails it (``afid_fatal``); an uncorrected
    non-fatal one that asks nothing yet degrades it (``afid_recent``); a corrected one
    (AFID 24) leaves it ok: counted, a rate alert.
    """
    state = ACTION_STATES.get(finding.action)
    if escalated and state == FAILED:
        return "afid_repeated", FAILED
    if state == FAILED:
        return "afid_fatal", FAILED
    if state is not None or finding.severity == afids.NON_FATAL:
        return "afid_recent", DEGRADED
    return None


def _amd_reasons(
    readings: Iterable[Reading],
    retired: dict[Identity, float],
    found: dict[Identity, list[Finding]],
    escalated: set[tuple[Identity, str]],
) -> dict[Identity, dict[str, str]]:
    """The AMD rules, by device: AFIDs that still count, bad pages against the threshold.

    Only devices with AMD bad-page or AFID readings have an entry (an empty one
    still marks a device whose bad pages AMD's rules judge). ``escalated``: the
    (identity, reason) of the AFID findings that are a repeat's escalation.
    """
    pending: dict[Identity, float] = {}
    threshold: dict[Identity, float] = {}
    out: dict[Identity, dict[str, str]] = {}
    for r in readings:
        if not isinstance(r.value, float):
            continue
        ident = r.labels[:2]
        if r.metric == ACCEL_AMD_BAD_PAGES:
            out.setdefault(ident, {})
            if r.labels[2] == "pending":
                pending[ident] = r.value
        elif r.metric == ACCEL_AMD_BAD_PAGE_THRESHOLD:
            out.setdefault(ident, {})
            threshold[ident] = r.value
    for ident, findings in found.items():
        for finding in findings:
            if finding.reason.startswith("afid_"):
                reasons = out.setdefault(ident, {})
                got = _afid_state(finding, (ident, finding.reason) in escalated)
                if got is not None:
                    reasons[got[0]] = got[1]
    for ident, reasons in out.items():
        if pending.get(ident, 0.0) > 0:
            reasons["bad_pages_pending"] = DEGRADED
        limit, pages = threshold.get(ident), retired.get(ident, 0.0)
        if limit is not None and limit > 0:
            if pages > limit:
                reasons["bad_pages_over_threshold"] = FAILED
            elif pages >= BAD_PAGES_NEAR_SHARE * limit:
                reasons["bad_pages_near_threshold"] = PREDICTED
    return out


def readings(verdicts: Iterable[DeviceHealth]) -> list[Reading]:
    """The health families of each verdict: the one place /metrics spells them.

    ``accel_device_health`` one-hot over the states (all four 0 for an unknown
    device: none of them holds, the exporter cannot vouch), a reason series per
    reason, ``accel_device_recommended_action`` one-hot over the actions, an
    ``accel_device_action_reason_info`` series per finding and an
    ``accel_device_action_scope_info`` series per device the action reaches.
    """
    out: list[Reading] = []
    for verdict in verdicts:
        ident = (verdict.device, verdict.uuid)
        for state in STATES:
            value = 1.0 if state == verdict.state else 0.0
            out.append(Reading(ACCEL_DEVICE_HEALTH, (*ident, state), value))
        for reason in verdict.reasons:
            out.append(Reading(ACCEL_DEVICE_HEALTH_REASON_INFO, (*ident, reason.reason), 1.0))
        for name in actions.ACTIONS:
            value = 1.0 if name == verdict.action else 0.0
            out.append(Reading(ACCEL_DEVICE_RECOMMENDED_ACTION, (*ident, name), value))
        for finding in verdict.findings:
            labels = (
                *ident,
                finding.reason,
                finding.action,
                finding.scope,
                finding.escalation,
                finding.escalation_scope if finding.escalation else "",
                finding.provenance,
            )
            out.append(Reading(ACCEL_DEVICE_ACTION_REASON_INFO, labels, 1.0))
        for uuid in verdict.scope_uuids:
            reach = (*ident, verdict.scope, uuid)
            out.append(Reading(ACCEL_DEVICE_ACTION_SCOPE_INFO, reach, 1.0))
        for signal, entry, count in verdict.downgraded:
            labels2 = (*ident, signal, entry)
            out.append(Reading(ACCEL_HEALTH_SIGNAL_DOWNGRADED_TOTAL, labels2, count))
    return out
