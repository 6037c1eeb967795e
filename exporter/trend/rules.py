"""The trend rules as data: ``exporter/trend_rules.yaml``, loaded and checked at import.

Each rule as :class:`~exporter.trend.tracker.TrendRule`; a rule that cannot be
loaded (an unknown key, a state ``failed``, a family or label the catalog lacks) is a
:class:`~exporter.trend.tracker.RuleError` naming the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from exporter.actions import Advice
from exporter.trend.tracker import RuleError, TrendRule
from exporter.yaml_list import listed


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
    raws = listed(text, "rules", "trend rules", RuleError)
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
