"""Error rates as trends: a consecutive-window rule over counter families.

A decay signal (NVLink replays, XGMI or PCIe link errors, InfiniBand symbol errors)
says little in one reading and much as a rate that stays up. A :class:`TrendTracker`
turns the counter readings of each poll into one rate per series and per window
(``length_s`` seconds of the source's own readings), and a rule is *raised* for a
series after ``raise`` consecutive windows at or above its threshold, *cleared*
after ``clear`` consecutive windows below it. A counter that goes backwards (a
driver reload, a device reset, a counter cleared by hand) is a new baseline, never a
negative rate; so is a device that was down or unread since its last reading. Series
no poll has had for a while are forgotten (bounded memory).

The rules are data (``trend_rules.yaml`` beside this module, loaded and checked at
import: a rule asking ``failed`` is refused, a decay is never a failure): the
family, the labels it selects, the threshold per second, the windows, the state it
leads to (``degraded`` or ``predicted_failure``) and the :class:`~exporter.actions.
Advice` with where the number comes from. The known-noisy-signal registry
(:mod:`exporter.noisy_signals`) may downgrade a raised rule; :class:`DeviceTrends`
applies both for the health judge of a device source. docs/health.md ("Trends")
lists every rule.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import yaml

from exporter import evidence, log, noisy_signals
from exporter.actions import ACTIONS, PROVENANCES, SCOPES, Advice
from exporter.catalog import CATALOG
from exporter.model import Reading
from exporter.verdict import DEGRADED, FAILED, PREDICTED, RANK, DeviceHealth, Finding

Identity = tuple[str, ...]

# The states a trend may lead to; FAILED is refused at load (a rate is no failure).
TREND_STATES = (DEGRADED, PREDICTED)
# How a rule's threshold is scaled per subject: "" not at all; "pcie_link" by the
# device's current PCIe link (DCGM's replay-rate rule: per lane and per Gb/s of it).
SCALES = ("", "pcie_link")
# A poll's cadence jitters by a few percent (the poll's own latency is in its clock):
# a window closes, and counts as of its nominal length, within this share of it.
JITTER = 0.05
# Gb/s of one lane by PCIe generation (the table DCGM's health watch scales by).
PCIE_LANE_GBPS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
# The readings a PCIe-scaled rule reads the link from (shared device families).
PCIE_LINK_FAMILIES = ("accel_pcie_link_generation", "accel_pcie_link_width")
# A series no poll had for this many of its windows (beyond raise/clear) is forgotten.
FORGET_WINDOWS = 2


class RuleError(ValueError):
    """A trend rule that cannot be loaded (the message names the rule and the field)."""


@dataclass(frozen=True)
class TrendRule:
    """One rate rule: which series, the threshold, the windows, the state and the advice.

    ``reason`` is the health reason it raises (``nvlink_error_rate``), ``signal`` the
    name the noisy-signal registry knows it by (``nvlink_replay``), ``match`` the
    accepted values by label (empty: every series of ``family``), ``subject`` the
    labels naming what the rate is about (a device: ``device``, ``uuid``),
    ``threshold_per_s`` the rate at or above which a window counts, ``length_s`` a
    window's length, ``raise_windows``/``clear_windows`` the consecutive windows
    above/below that raise/clear it, ``scale`` how the threshold scales per subject
    (:data:`SCALES`), ``source`` where the number comes from, in words (docs).
    """

    reason: str
    signal: str
    family: str
    threshold_per_s: float
    state: str
    advice: Advice
    match: tuple[tuple[str, tuple[str, ...]], ...] = ()
    subject: tuple[str, ...] = ("device", "uuid")
    length_s: float = 60.0
    raise_windows: int = 3
    clear_windows: int = 3
    scale: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        """Refuse what the rule vocabulary does not allow, naming the rule."""
        where = f"trend rule {self.reason or '?'}"
        if self.state == FAILED:
            raise RuleError(f"{where}: state failed refused: a trend leads to degraded at most")
        if self.state not in TREND_STATES:
            raise RuleError(f"{where}: state {self.state!r} is not one of {TREND_STATES}")
        if not (self.threshold_per_s > 0 and math.isfinite(self.threshold_per_s)):
            raise RuleError(f"{where}: threshold must be a positive rate")
        if not (self.length_s > 0 and self.raise_windows >= 1 and self.clear_windows >= 1):
            raise RuleError(f"{where}: windows need a positive length and counts >= 1")
        if self.scale not in SCALES:
            raise RuleError(f"{where}: scale {self.scale!r} is not one of {SCALES}")
        spec = CATALOG.get(self.family)
        if spec is None:
            raise RuleError(f"{where}: family {self.family} is not in the catalog")
        unknown = [n for n in (*self.subject, *dict(self.match)) if n not in spec.labels]
        if unknown:
            raise RuleError(f"{where}: {self.family} has no label {', '.join(unknown)}")
        for name, values in self.match:
            allowed = spec.values.get(name)
            if allowed and set(values) - set(allowed):
                bad = ", ".join(sorted(set(values) - set(allowed)))
                raise RuleError(f"{where}: {name} is never {bad} (the catalog enumerates it)")
        advice = self.advice
        if advice.action not in ACTIONS or (advice.escalation and advice.escalation not in ACTIONS):
            raise RuleError(f"{where}: action or escalation not in the vocabulary")
        if advice.scope not in SCOPES or advice.provenance not in PROVENANCES:
            raise RuleError(f"{where}: scope or provenance not in the vocabulary")

    @property
    def forget_after_s(self) -> float:
        """How long a series may go unread before it is forgotten."""
        return self.length_s * (max(self.raise_windows, self.clear_windows) + FORGET_WINDOWS)


@dataclass(frozen=True)
class Hit:
    """A raised rule on one series, as the last closed window left it."""

    rule: TrendRule
    subject: Identity
    labels: tuple[str, ...]
    rate: float
    threshold: float
    # True on the poll the rule was raised (what the noisy-signal counter counts).
    raised: bool = False

    def detail(self) -> str:
        """The rate, the threshold and the windows, in words (the finding's detail)."""
        spec = CATALOG[self.rule.family]
        series = ",".join(
            f"{name}={value}"
            for name, value in zip(spec.labels, self.labels, strict=False)
            if name not in self.rule.subject
        )
        rule = self.rule
        return (
            f"{rule.family}{{{series}}} at {self.rate:.3g}/s, at or above {self.threshold:.3g}/s"
            f" for {rule.raise_windows} windows of {rule.length_s:g} s"
            + (f"; {rule.advice.detail}" if rule.advice.detail else "")
        )


@dataclass
class _Series:
    """What the tracker keeps of one series: the window's baseline and the streaks."""

    base: float
    base_at: float
    last: float
    seen: float
    above: int = 0
    below: int = 0
    active: bool = False
    rate: float = 0.0
    threshold: float = 0.0
    # The subject was down or unread since: the next reading is a new baseline.
    rebase: bool = False


def _matcher(rule: TrendRule) -> tuple[tuple[int, frozenset[str]], ...]:
    """(label position, accepted values) of the rule's match."""
    labels = CATALOG[rule.family].labels
    return tuple((labels.index(name), frozenset(values)) for name, values in rule.match)


def pcie_factor(generation: float, width: float) -> float | None:
    """Gb/s of the whole link at ``generation`` x ``width``; None when either is unknown."""
    gen = int(generation)
    if gen < 1 or width < 1:
        return None
    # A generation newer than the table: its newest, as DCGM caps it.
    return PCIE_LANE_GBPS[min(gen, max(PCIE_LANE_GBPS))] * width


@dataclass
class TrendTracker:
    """Rates and streaks of every series the rules select; raised rules as :class:`Hit`."""

    rules: tuple[TrendRule, ...]
    # Log context: the source whose readings these are.
    name: str = ""
    _series: dict[tuple[int, tuple[str, ...]], _Series] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_family: dict[str, list[int]] = {}
        for index, rule in enumerate(self.rules):
            self._by_family.setdefault(rule.family, []).append(index)
        self._matchers = [_matcher(rule) for rule in self.rules]
        self._subjects = [
            tuple(CATALOG[r.family].labels.index(n) for n in r.subject) for r in self.rules
        ]
        self._scaled = any(rule.scale == "pcie_link" for rule in self.rules)

    @property
    def families(self) -> frozenset[str]:
        """The families the rules read (link families too, for a scaled rule)."""
        names = set(self._by_family)
        if self._scaled:
            names.update(PCIE_LINK_FAMILIES)
        return frozenset(names)

    def __len__(self) -> int:
        """How many series the tracker holds."""
        return len(self._series)

    def observe(
        self,
        readings: Iterable[Reading],
        now: float,
        *,
        restarted: Collection[Identity] = (),
    ) -> list[Hit]:
        """Take one poll's readings at monotonic time ``now``; the rules raised after it.

        ``restarted``: subjects that were down or unread in this poll; each of their
        series starts a new baseline at its next reading (the counts from before the
        restart are not compared with those after it).
        """
        readings = list(readings)
        links = self._links(readings) if self._scaled else {}
        if restarted:
            for (index, labels), held in self._series.items():
                if self._subject(index, labels) in restarted:
                    held.rebase = True
        raised: set[tuple[int, tuple[str, ...]]] = set()
        for r in readings:
            indexes = self._by_family.get(r.metric)
            if indexes is None or not isinstance(r.value, float):
                continue
            for index in indexes:
                if all(r.labels[pos] in ok for pos, ok in self._matchers[index]):
                    key = (index, r.labels)
                    if self._step(key, r.value, now, links):
                        raised.add(key)
        self._prune(now)
        return self._hits(raised)

    def subjects(self) -> set[Identity]:
        """The subjects the tracker holds series of."""
        return {self._subject(index, labels) for index, labels in self._series}

    def _subject(self, index: int, labels: tuple[str, ...]) -> Identity:
        """The subject (e.g. device, uuid) of one series of rule ``index``."""
        return tuple(labels[pos] for pos in self._subjects[index])

    def _links(self, readings: Sequence[Reading]) -> dict[Identity, float]:
        """Gb/s of each device's current PCIe link (where both gen and width are read)."""
        gen: dict[Identity, float] = {}
        width: dict[Identity, float] = {}
        for r in readings:
            if r.metric in PCIE_LINK_FAMILIES and isinstance(r.value, float):
                (gen if r.metric == PCIE_LINK_FAMILIES[0] else width)[r.labels[:2]] = r.value
        out = {}
        for ident, g in gen.items():
            gbps = pcie_factor(g, width.get(ident, 0.0))
            if gbps is not None:
                out[ident] = gbps
        return out

    def _threshold(
        self, rule: TrendRule, subject: Identity, links: Mapping[Identity, float]
    ) -> float | None:
        """The rule's threshold for ``subject``; None where a scaled one cannot be known."""
        if rule.scale != "pcie_link":
            return rule.threshold_per_s
        gbps = links.get(subject)
        if gbps is None:
            return None  # DCGM's health watch skips the check without gen and width too
        # DCGM warns on more replays a minute than ceil(BER 1e-12 x the link's bits a
        # minute): "more than N" is "at least N + 1" of whole replays.
        return (math.ceil(rule.threshold_per_s * 60 * gbps) + 1) / 60

    def _step(
        self,
        key: tuple[int, tuple[str, ...]],
        value: float,
        now: float,
        links: Mapping[Identity, float],
    ) -> bool:
        """Take one reading of one series; True when it raised its rule now."""
        index, labels = key
        rule = self.rules[index]
        held = self._series.get(key)
        if held is None:
            self._series[key] = _Series(value, now, value, now)
            return False
        held.seen = now
        if held.rebase or value < held.last:
            if value < held.last and not held.rebase:
                log.get(component="trend", source=self.name).info(
                    "counter went backwards: new baseline",
                    family=rule.family,
                    labels=list(labels),
                    was=held.last,
                    now=value,
                )
            held.base, held.base_at, held.last, held.rebase = value, now, value, False
            return False
        held.last = value
        elapsed = now - held.base_at
        if elapsed < rule.length_s * (1 - JITTER):
            return False
        subject = self._subject(index, labels)
        threshold = self._threshold(rule, subject, links)
        # A window a poll's jitter longer or shorter than nominal is the nominal one (one
        # error in 60.3 s is one a minute); a longer gap (a missed poll) is measured.
        span = rule.length_s if abs(elapsed - rule.length_s) <= JITTER * rule.length_s else elapsed
        rate = (value - held.base) / span
        held.base, held.base_at = value, now
        if threshold is None:
            return False
        held.rate, held.threshold = rate, threshold
        if rate >= threshold:
            held.above, held.below = held.above + 1, 0
        else:
            held.above, held.below = 0, held.below + 1
        if not held.active and held.above >= rule.raise_windows:
            held.active = True
            log.get(component="trend", source=self.name).warning(
                "trend raised",
                reason=rule.reason,
                subject=list(subject),
                labels=list(labels),
                rate=rate,
                threshold=threshold,
                windows=held.above,
            )
            return True
        if held.active and held.below >= rule.clear_windows:
            held.active = False
            log.get(component="trend", source=self.name).info(
                "trend cleared",
                reason=rule.reason,
                subject=list(subject),
                labels=list(labels),
                rate=rate,
                windows=held.below,
            )
        return False

    def _prune(self, now: float) -> None:
        """Forget the series no poll has had for longer than their rule allows."""
        gone = [
            key
            for key, held in self._series.items()
            if now - held.seen > self.rules[key[0]].forget_after_s
        ]
        for key in gone:
            held = self._series.pop(key)
            if held.active:
                log.get(component="trend", source=self.name).info(
                    "trend forgotten: its series is gone",
                    reason=self.rules[key[0]].reason,
                    labels=list(key[1]),
                )

    def _hits(self, raised: Collection[tuple[int, tuple[str, ...]]]) -> list[Hit]:
        """Every raised series, as a hit."""
        return [
            Hit(
                self.rules[index],
                self._subject(index, labels),
                labels,
                held.rate,
                held.threshold,
                raised=(index, labels) in raised,
            )
            for (index, labels), held in self._series.items()
            if held.active
        ]


# -- the rules, as data -------------------------------------------------------------


def _advice(raw: Mapping[str, Any], where: str) -> Advice:
    known = {"action", "scope", "escalation", "detail", "provenance", "reference"}
    extra = set(raw) - known
    if extra or "action" not in raw or "reference" not in raw:
        raise RuleError(f"{where}: advice needs action and reference, and nothing but {known}")
    return Advice(
        str(raw["action"]),
        str(raw.get("scope", "device")),
        str(raw.get("escalation", "")),
        str(raw.get("detail", "")),
        str(raw.get("provenance", "exporter_rule")),
        str(raw["reference"]),
    )


def _threshold(raw: Any, where: str) -> float:
    """``{count: N, per_s: S}`` (N events per S seconds) as a rate per second."""
    if not isinstance(raw, Mapping) or set(raw) != {"count", "per_s"}:
        raise RuleError(f"{where}: threshold is {{count, per_s}}")
    try:
        return float(raw["count"]) / float(raw["per_s"])
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise RuleError(f"{where}: threshold: {exc}") from exc


def rule_of(raw: Mapping[str, Any]) -> TrendRule:
    """One rule from its data (a mapping as ``trend_rules.yaml`` writes it)."""
    where = f"trend rule {raw.get('reason', '?')}"
    known = {
        "reason",
        "signal",
        "family",
        "match",
        "subject",
        "threshold",
        "windows",
        "state",
        "scale",
        "advice",
        "source",
    }
    if set(raw) - known:
        raise RuleError(f"{where}: unknown keys {sorted(set(raw) - known)}")
    windows = raw.get("windows") or {}
    if not isinstance(windows, Mapping) or set(windows) - {"length_s", "raise", "clear"}:
        raise RuleError(f"{where}: windows is {{length_s, raise, clear}}")
    match = raw.get("match") or {}
    if not isinstance(match, Mapping):
        raise RuleError(f"{where}: match is label -> [values]")
    try:
        return TrendRule(
            reason=str(raw["reason"]),
            signal=str(raw["signal"]),
            family=str(raw["family"]),
            threshold_per_s=_threshold(raw.get("threshold"), where),
            state=str(raw["state"]),
            advice=_advice(raw.get("advice") or {}, where),
            match=tuple(
                (str(k), tuple(str(v) for v in (vs if isinstance(vs, list) else [vs])))
                for k, vs in match.items()
            ),
            subject=tuple(str(s) for s in raw.get("subject", ("device", "uuid"))),
            length_s=float(windows.get("length_s", 60.0)),
            raise_windows=int(windows.get("raise", 3)),
            clear_windows=int(windows.get("clear", 3)),
            scale=str(raw.get("scale", "")),
            source=str(raw.get("source", "")),
        )
    except KeyError as exc:
        raise RuleError(f"{where}: missing {exc.args[0]}") from exc


def load_rules(text: str) -> tuple[TrendRule, ...]:
    """Every rule of a rules document (YAML: ``rules: [...]``); RuleError on any bad one."""
    doc = yaml.safe_load(text) or {}
    raws = doc.get("rules") if isinstance(doc, Mapping) else None
    if not isinstance(raws, list):
        raise RuleError("trend rules: the document needs a list under 'rules'")
    rules = tuple(rule_of(raw) for raw in raws)
    seen: dict[tuple[str, str, tuple[tuple[str, tuple[str, ...]], ...]], str] = {}
    for rule in rules:
        key = (rule.family, rule.reason, rule.match)
        if key in seen:
            raise RuleError(f"trend rule {rule.reason}: the same family and match twice")
        seen[key] = rule.reason
    return rules


RULES: tuple[TrendRule, ...] = load_rules(
    resources.files("exporter").joinpath("trend_rules.yaml").read_text(encoding="utf-8")
)
# The rules about a device's own counters (the device sources' judge applies them); the
# rest are about the fabric (NICs, PCIe functions) and reach a GPU through its joins.
DEVICE_RULES = tuple(rule for rule in RULES if rule.subject == ("device", "uuid"))
FABRIC_RULES = tuple(rule for rule in RULES if rule.subject != ("device", "uuid"))


# -- the device sources' hook ----------------------------------------------------------


@dataclass(frozen=True)
class TrendVerdict:
    """What a raised rule does to one device: its reason, the state, the finding."""

    reason: str
    state: str
    finding: Finding


def finding(hit: Hit, state: str) -> Finding:
    """The finding of a hit, with its rule's advice."""
    a = hit.rule.advice
    return Finding(
        hit.rule.reason,
        a.action,
        scope=a.scope,
        escalation=a.escalation,
        detail=hit.detail(),
        provenance=a.provenance,
        reference=a.reference,
    )


@dataclass
class DeviceTrends:
    """The trend rules of one device source, the noisy-signal registry applied to them.

    :meth:`judge` takes a poll's readings and gives each device the reasons its raised
    rules lead to (a registry entry may take the verdict away or lower it: counted by
    device, signal and entry); :meth:`counted` puts those counts on the records.
    """

    tracker: TrendTracker = field(default_factory=lambda: TrendTracker(DEVICE_RULES))
    registry: tuple[noisy_signals.Entry, ...] = noisy_signals.REGISTRY
    # identity -> (signal, entry id) -> downgrades counted.
    _downgraded: dict[Identity, dict[tuple[str, str], float]] = field(default_factory=dict)

    # The rules file in use ("": the shipped rules).
    rules_path: str = ""

    def reconfigured(self, path: str, source: str = "") -> DeviceTrends:
        """Itself when ``path`` names the rules in use, else trends with the rules of ``path``.

        New rules start their windows afresh; a file that does not load keeps the rules
        in use (the config check refused it at start-up; logged once here on a reload).
        """
        if path == self.rules_path:
            return self
        rules = DEVICE_RULES
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    loaded = load_rules(handle.read())
            except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
                log.get(component="trend", source=source).error(
                    "trend rules not loaded; the rules in use stay", path=path, problem=str(exc)
                )
                return self
            rules = tuple(rule for rule in loaded if rule.subject == ("device", "uuid"))
        log.get(component="trend", source=source).info(
            "trend rules loaded", path=path or "(shipped)", rules=len(rules)
        )
        return DeviceTrends(TrendTracker(rules, source), self.registry, rules_path=path)

    def judge(
        self,
        readings: Iterable[Reading],
        now: float,
        wall: float,
        unread: Collection[Identity] = (),
    ) -> dict[Identity, list[TrendVerdict]]:
        """Each read device's trend verdicts after this poll (none for unread devices)."""
        wanted = self.tracker.families | noisy_signals.FACT_FAMILIES | {"accel_device_up"}
        mine = [r for r in readings if r.metric in wanted and r.labels[:2] not in unread]
        down = {r.labels[:2] for r in mine if r.metric == "accel_device_up" and r.value == 0}
        hits = self.tracker.observe(mine, now, restarted={*down, *unread})
        if not hits:
            return {}
        facts = noisy_signals.facts(mine)
        out: dict[Identity, dict[str, TrendVerdict]] = {}
        for hit in hits:
            state, entry = noisy_signals.downgrade(
                self.registry,
                hit.rule.signal,
                hit.rule.state,
                facts.get(hit.subject, {}),
                hit.labels,
                CATALOG[hit.rule.family].labels,
                wall,
            )
            if entry is not None and hit.raised:
                counts = self._downgraded.setdefault(hit.subject, {})
                key = (hit.rule.signal, entry.id)
                counts[key] = counts.get(key, 0.0) + 1
            if state is None:
                continue
            held = out.setdefault(hit.subject, {}).get(hit.rule.reason)
            if held is None or RANK[state] > RANK[held.state]:
                out[hit.subject][hit.rule.reason] = TrendVerdict(
                    hit.rule.reason, state, finding(hit, state)
                )
        return {ident: list(by.values()) for ident, by in out.items()}

    def counted(self, records: Sequence[DeviceHealth]) -> tuple[DeviceHealth, ...]:
        """``records`` with each device's downgrade counts; counts of devices gone dropped."""
        present = {(r.device, r.uuid) for r in records}
        held = self.tracker.subjects()
        for ident in [i for i in self._downgraded if i not in present and i not in held]:
            del self._downgraded[ident]
        out = []
        for record in records:
            counts = self._downgraded.get((record.device, record.uuid))
            if counts:
                record = replace(
                    record,
                    downgraded=tuple((s, e, n) for (s, e), n in sorted(counts.items())),
                )
            out.append(record)
        return tuple(out)


# -- the fabric's hook: trend hits as evidence for the GPUs they reach ----------------

# The families that name which GPU a NIC or a PCI function serves (exporter.catalog.fabric).
JOIN_FAMILIES = frozenset({"accel_nic_gpu_info", "accel_pci_device_info"})
# Evidence a fabric poll posts lives this many of its rule's windows beyond the clear
# streak: renewed every poll, gone by itself when the fabric source stops posting.
EVIDENCE_WINDOWS = 2


@dataclass
class FabricTrends:
    """The fabric's trend rules; each raised one posted to the evidence board as ``trend``.

    A hit on a NIC port (``nic``, ``port``) is evidence for every GPU joined to the NIC
    (``accel_nic_gpu_info``); a hit on a PCI function (``pci_bus_id``) for the device at
    that bus id, or, when the function is a NIC (``accel_pci_device_info`` kind nic),
    for the GPUs joined to it. :meth:`post` replaces all of the ``trend`` source's
    evidence at once, so a cleared or forgotten rule is gone from the board.
    """

    tracker: TrendTracker = field(default_factory=lambda: TrendTracker(FABRIC_RULES, "fabric"))
    board: evidence.EvidenceBoard = evidence.BOARD

    @property
    def families(self) -> frozenset[str]:
        """The families :meth:`post` reads (the rules' and the joins)."""
        return self.tracker.families | JOIN_FAMILIES

    def post(self, readings: Iterable[Reading], now: float, wall: float) -> int:
        """Take one fabric poll (monotonic ``now``, wall-clock ``wall``); items posted.

        Never raises for what the readings hold: a join that names no GPU posts nothing.
        """
        wanted = self.families
        mine = [r for r in readings if r.metric in wanted]
        gpus: dict[str, set[str]] = {}  # nic -> device keys of the GPUs it serves
        nic_at: dict[str, str] = {}  # pci bus id -> the NIC there
        for r in mine:
            if r.metric == "accel_nic_gpu_info":
                nic, _device, uuid, bus, _via = r.labels
                key = evidence.device_key(uuid or bus)
                if key:
                    gpus.setdefault(nic, set()).add(key)
            elif r.metric == "accel_pci_device_info" and r.labels[1] == "nic" and r.labels[4]:
                nic_at[evidence.device_key(r.labels[0])] = r.labels[4]
        items: dict[str, list[evidence.Evidence]] = {}
        for hit in self.tracker.observe(mine, now):
            rule = hit.rule
            if rule.subject == ("nic", "port"):
                nic, port = hit.subject
                keys, where = gpus.get(nic, set()), f"NIC {nic} port {port}"
            else:
                bus = evidence.device_key(hit.subject[0])
                nic2 = nic_at.get(bus)
                keys = gpus.get(nic2, set()) if nic2 else {bus}
                where = f"PCI {bus}" + (f" (NIC {nic2})" if nic2 else "")
            item = evidence.Evidence(
                source="trend",
                reason=rule.reason,
                state=rule.state,
                advice=rule.advice,
                observed_at=wall,
                expires_at=wall + rule.length_s * (rule.clear_windows + EVIDENCE_WINDOWS),
                detail=f"{where}: {hit.detail()}",
            )
            for key in sorted(keys):
                items.setdefault(key, []).append(item)
        self.board.replace("trend", items)
        return sum(len(v) for v in items.values())


# The fabric trends of each board: a reload's new fabric source finds the windows and
# streaks of the one before (a trend does not start over, nor blink, at a reload).
_FABRIC: weakref.WeakKeyDictionary[evidence.EvidenceBoard, FabricTrends] = (
    weakref.WeakKeyDictionary()
)
_FABRIC_LOCK = threading.Lock()


def fabric_trends(
    board: evidence.EvidenceBoard = evidence.BOARD, rules: Sequence[TrendRule] | None = None
) -> FabricTrends:
    """The fabric trends posting to ``board`` (one per board); the fabric source's hook.

    ``rules`` (default: the shipped fabric rules) are those of the board's first call;
    later calls get the trends already made.
    """
    with _FABRIC_LOCK:
        found = _FABRIC.get(board)
        if found is None:
            tracker = TrendTracker(tuple(FABRIC_RULES if rules is None else rules), "fabric")
            found = _FABRIC[board] = FabricTrends(tracker, board)
        return found
