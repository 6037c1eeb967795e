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

The rules are data (``exporter/trend_rules.yaml``, loaded and checked at
import: a rule asking ``failed`` is refused, a decay is never a failure): the
family, the labels it selects, the threshold per second, the windows, the state it
leads to (``degraded`` or ``predicted_failure``) and the :class:`~exporter.actions.
Advice` with where the number comes from. The known-noisy-signal registry
(:mod:`exporter.noisy_signals`) may downgrade a raised rule; :class:`DeviceTrends`
applies both for the health judge of a device source. docs/health.md ("Trends")
lists every rule.

The package: :mod:`~exporter.trend.tracker` (the rule itself), :mod:`~exporter.trend.rules`
(the shipped rules, as data) and :mod:`~exporter.trend.hooks` (what hits do).
"""

from __future__ import annotations

from exporter.trend.hooks import (
    EVIDENCE_WINDOWS,
    JOIN_FAMILIES,
    DeviceTrends,
    FabricTrends,
    TrendVerdict,
    fabric_trends,
    finding,
)
from exporter.trend.rules import DEVICE_RULES, FABRIC_RULES, RULES, load_rules, rule_of
from exporter.trend.tracker import (
    FORGET_WINDOWS,
    JITTER,
    PCIE_LANE_GBPS,
    PCIE_LINK_FAMILIES,
    SCALES,
    TREND_STATES,
    Hit,
    RuleError,
    TrendRule,
    TrendTracker,
    pcie_factor,
)

__all__ = [
    "DEVICE_RULES",
    "EVIDENCE_WINDOWS",
    "FABRIC_RULES",
    "FORGET_WINDOWS",
    "JITTER",
    "JOIN_FAMILIES",
    "PCIE_LANE_GBPS",
    "PCIE_LINK_FAMILIES",
    "RULES",
    "SCALES",
    "TREND_STATES",
    "DeviceTrends",
    "FabricTrends",
    "Hit",
    "RuleError",
    "TrendRule",
    "TrendTracker",
    "TrendVerdict",
    "fabric_trends",
    "finding",
    "load_rules",
    "pcie_factor",
    "rule_of",
]
