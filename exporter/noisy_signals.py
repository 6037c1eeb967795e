"""The registry of known-noisy signals: what vendors found to fail healthy devices.

A trend rule (:mod:`exporter.trend`) names its ``signal``; an entry of the registry
(``noisy_signals.yaml`` beside this module, loaded and checked at import) names the
signals it applies to, the condition under which it does (a library or driver version
the daemon reads, a flag, a stale record) and its effect: ``no_verdict`` (the rule
gives the device no reason and no finding; the rate stays a trend for the recording
rules and alerts) or ``predicted`` (a degraded rule leads to predicted_failure only).
The conditions read *facts*, per device, from readings the daemon already has:
``vendor`` and ``driver_version`` (``accel_device_info``), ``corrected_afids_decoded``
(``accel_amd_corrected_afids_decoded``: 0 on amdsmi before 26.5.0) and the newest CPER
record time of each AFID (``accel_amd_afid_last_timestamp_seconds``). A version that
cannot be read leaves a version condition unmet: nothing is downgraded on a guess.
docs/health.md prints the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from exporter.catalog.device import INFO_LABELS
from exporter.family_names import (
    ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
    ACCEL_AMD_CORRECTED_AFIDS_DECODED,
    ACCEL_DEVICE_INFO,
)
from exporter.model import Reading
from exporter.verdict import DEGRADED, PREDICTED
from exporter.yaml_list import listed

Identity = tuple[str, ...]

EFFECTS = ("no_verdict", "predicted")
CONDITIONS = ("always", "equals", "version_below", "version_from", "stale_record")
# The families facts are read from.
FACT_FAMILIES = frozenset(
    {
        ACCEL_DEVICE_INFO,
        ACCEL_AMD_CORRECTED_AFIDS_DECODED,
        ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
    }
)
# accel_device_info's label positions.
_INFO_VENDOR, _INFO_DEVICE, _INFO_UUID, _INFO_DRIVER = (
    INFO_LABELS.index(name) for name in ("vendor", "device", "uuid", "driver_version")
)
# A fact name for the newest CPER record of one AFID.
RECORD_FACT = "cper_newest:"
_NUMBER = re.compile(r"\d+")


class RegistryError(ValueError):
    """A registry entry that cannot be loaded (the message names the entry)."""


@dataclass(frozen=True)
class Condition:
    """When an entry applies: ``kind`` one of :data:`CONDITIONS` and its arguments.

    ``fact`` and ``value`` for equals / version_below / version_from (``vendor``, when
    given, limits a version condition to that vendor's devices); ``label`` and
    ``older_than_s`` for stale_record (the series' AFID label, the record's age).
    """

    kind: str
    fact: str = ""
    value: str = ""
    vendor: str = ""
    label: str = ""
    older_than_s: float = 0.0

    def describe(self) -> str:
        """The condition in words (docs)."""
        if self.kind == "always":
            return "always"
        if self.kind == "equals":
            return f"{self.fact} = {self.value}"
        if self.kind == "stale_record":
            return f"newest CPER record of the {self.label} older than {self.older_than_s:g} s"
        op = "<" if self.kind == "version_below" else ">="
        who = f"{self.vendor} " if self.vendor else ""
        return f"{who}{self.fact} {op} {self.value}"


@dataclass(frozen=True)
class Entry:
    """One known-noisy signal: which signals, when, what it does, and who said so."""

    id: str
    signals: tuple[str, ...]
    effect: str
    when: Condition
    statement: str
    reference: str
    why: str = ""


def version(text: str) -> tuple[int, ...] | None:
    """The numbers of a version string (``570.86.15`` -> (570, 86, 15)); None when none."""
    found = _NUMBER.findall(text)
    return tuple(int(n) for n in found) if found else None


def facts(readings: Iterable[Reading]) -> dict[Identity, dict[str, str]]:
    """The facts the conditions read, by device (device, uuid)."""
    out: dict[Identity, dict[str, str]] = {}
    for r in readings:
        if r.metric == ACCEL_DEVICE_INFO:
            held = out.setdefault((r.labels[_INFO_DEVICE], r.labels[_INFO_UUID]), {})
            held["vendor"] = r.labels[_INFO_VENDOR]
            held["driver_version"] = r.labels[_INFO_DRIVER]
        elif r.metric == ACCEL_AMD_CORRECTED_AFIDS_DECODED and isinstance(r.value, float):
            out.setdefault(r.labels[:2], {})["corrected_afids_decoded"] = f"{r.value:g}"
        elif r.metric == ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS and isinstance(r.value, float):
            out.setdefault(r.labels[:2], {})[RECORD_FACT + r.labels[2]] = repr(r.value)
    return out


def holds(
    when: Condition,
    known: Mapping[str, str],
    labels: Sequence[str],
    names: Sequence[str],
    wall: float,
) -> bool:
    """Whether ``when`` holds for a series (its ``labels``, named ``names``) of a device."""
    if when.kind == "always":
        return True
    if when.kind == "stale_record":
        if when.label not in names:
            return False
        stamp = known.get(RECORD_FACT + labels[list(names).index(when.label)])
        return stamp is not None and wall - float(stamp) > when.older_than_s
    have = known.get(when.fact)
    if have is None:
        return False
    if when.kind == "equals":
        return have == when.value
    if when.vendor and known.get("vendor") != when.vendor:
        return False
    mine, bound = version(have), version(when.value)
    if mine is None or bound is None:
        return False  # a version that cannot be read downgrades nothing
    return mine < bound if when.kind == "version_below" else mine >= bound


def downgrade(
    registry: Sequence[Entry],
    signal: str,
    state: str,
    known: Mapping[str, str],
    labels: Sequence[str],
    names: Sequence[str],
    wall: float,
) -> tuple[str | None, Entry | None]:
    """(the state left, the entry that lowered it): (None, entry) takes the verdict away.

    The first entry naming ``signal`` whose condition holds decides; one that would
    change nothing (``predicted`` on a predicted rule) is no downgrade: (state, None).
    """
    for entry in registry:
        if signal not in entry.signals or not holds(entry.when, known, labels, names, wall):
            continue
        if entry.effect == "no_verdict":
            return None, entry
        if state == DEGRADED:
            return PREDICTED, entry
        return state, None
    return state, None


def _condition(raw: Any, where: str) -> Condition:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise RegistryError(f"{where}: when is one of {CONDITIONS}")
    ((kind, args),) = raw.items()
    if kind not in CONDITIONS:
        raise RegistryError(f"{where}: condition {kind!r} is not one of {CONDITIONS}")
    if kind == "always":
        if args is not True:
            raise RegistryError(f"{where}: always: true")
        return Condition("always")
    if not isinstance(args, Mapping):
        raise RegistryError(f"{where}: {kind} takes a mapping")
    if kind == "stale_record":
        if set(args) != {"label", "older_than_s"} or float(args["older_than_s"]) <= 0:
            raise RegistryError(f"{where}: stale_record is {{label, older_than_s > 0}}")
        return Condition(kind, label=str(args["label"]), older_than_s=float(args["older_than_s"]))
    if not {"fact", "value"} <= set(args) or set(args) - {"fact", "value", "vendor"}:
        raise RegistryError(f"{where}: {kind} is {{fact, value[, vendor]}}")
    if kind != "equals" and version(str(args["value"])) is None:
        raise RegistryError(f"{where}: {args['value']!r} is no version")
    return Condition(kind, str(args["fact"]), str(args["value"]), str(args.get("vendor", "")))


def entry_of(raw: Mapping[str, Any]) -> Entry:
    """One entry from its data (a mapping as ``noisy_signals.yaml`` writes it)."""
    where = f"noisy signal {raw.get('id', '?')}"
    known = {"id", "signals", "effect", "when", "statement", "reference", "why"}
    if set(raw) - known or not {"id", "signals", "effect", "when", "statement", "reference"} <= set(
        raw
    ):
        raise RegistryError(f"{where}: keys are {sorted(known)} (why optional)")
    if raw["effect"] not in EFFECTS:
        raise RegistryError(f"{where}: effect {raw['effect']!r} is not one of {EFFECTS}")
    signals = raw["signals"]
    if not isinstance(signals, list) or not signals:
        raise RegistryError(f"{where}: signals is a non-empty list")
    return Entry(
        str(raw["id"]),
        tuple(str(s) for s in signals),
        str(raw["effect"]),
        _condition(raw["when"], where),
        " ".join(str(raw["statement"]).split()),
        str(raw["reference"]),
        " ".join(str(raw.get("why", "")).split()),
    )


def load(text: str) -> tuple[Entry, ...]:
    """Every entry of a registry document (YAML: ``entries: [...]``); ids unique."""
    raws = listed(text, "entries", "noisy signals", RegistryError)
    entries = tuple(entry_of(raw) for raw in raws)
    ids = [e.id for e in entries]
    if len(ids) != len(set(ids)):
        raise RegistryError("noisy signals: entry ids must be unique")
    return entries


REGISTRY: tuple[Entry, ...] = load(
    resources.files("exporter").joinpath("noisy_signals.yaml").read_text(encoding="utf-8")
)
