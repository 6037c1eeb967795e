"""The consecutive-window rate tracker: rates per window, streaks, baselines, pruning.

See :mod:`exporter.trend` for the rule; this module knows nothing of where the rules
come from (:mod:`exporter.trend.rules`) or what their hits do
(:mod:`exporter.trend.hooks`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter import log
from exporter.actions import ACTIONS, PROVENANCES, SCOPES, Advice
from exporter.catalog import CATALOG
from exporter.family_names import ACCEL_PCIE_LINK_GENERATION, ACCEL_PCIE_LINK_WIDTH
from exporter.model import Reading
from exporter.verdict import DEGRADED, FAILED, PREDICTED

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
PCIE_LINK_FAMILIES = (ACCEL_PCIE_LINK_GENERATION, ACCEL_PCIE_LINK_WIDTH)
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
