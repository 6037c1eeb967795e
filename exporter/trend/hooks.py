"""What raised trend rules do: reasons of a device source's verdicts, evidence of the fabric.

:class:`DeviceTrends` is the health judge's (:class:`exporter.health.HealthJudge`):
the device rules on a device source's own readings, the noisy-signal registry applied,
the downgrades counted. :func:`fabric_trends` is the fabric source's: the fabric rules
on its readings, each hit posted to the evidence board as source ``trend`` for the GPUs
it reaches.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

import yaml

from exporter import evidence, log, noisy_signals
from exporter.catalog import CATALOG
from exporter.family_names import ACCEL_DEVICE_UP, ACCEL_NIC_GPU_INFO, ACCEL_PCI_DEVICE_INFO
from exporter.model import Reading
from exporter.trend.rules import DEVICE_RULES, FABRIC_RULES, load_rules
from exporter.trend.tracker import Hit, TrendRule, TrendTracker
from exporter.verdict import RANK, DeviceHealth, Finding

Identity = tuple[str, ...]


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
        wanted = self.tracker.families | noisy_signals.FACT_FAMILIES | {ACCEL_DEVICE_UP}
        mine = [r for r in readings if r.metric in wanted and r.labels[:2] not in unread]
        down = {r.labels[:2] for r in mine if r.metric == ACCEL_DEVICE_UP and r.value == 0}
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
JOIN_FAMILIES = frozenset({ACCEL_NIC_GPU_INFO, ACCEL_PCI_DEVICE_INFO})
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
            if r.metric == ACCEL_NIC_GPU_INFO:
                nic, _device, uuid, bus, _via = r.labels
                key = evidence.device_key(uuid or bus)
                if key:
                    gpus.setdefault(nic, set()).add(key)
            elif r.metric == ACCEL_PCI_DEVICE_INFO and r.labels[1] == "nic" and r.labels[4]:
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
