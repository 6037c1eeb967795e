"""A vendor-neutral health verdict per device, from the readings of one device source.

Pure: readings in, ``accel_device_health{state}`` (one-hot over ok, degraded,
failed, predicted_failure: OpenTelemetry's ``hw.status`` states) and
``accel_device_health_reason_info{reason}`` out. It reads only shared family
names, so every backend that fills them (NVIDIA, AMD, later ones) gets the same
rules. The few rules that compare with the past ("grew", "was up") keep their
memory in :class:`HealthJudge`, one per source. Every rule is in docs/health.md.

The worst state found wins: failed, then degraded, then predicted_failure; every
reason found is listed, whatever its state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from exporter.model import Reading

OK, DEGRADED, FAILED, PREDICTED = "ok", "degraded", "failed", "predicted_failure"
STATES = (OK, DEGRADED, FAILED, PREDICTED)
_RANK = {FAILED: 3, DEGRADED: 2, PREDICTED: 1}

# Recovery actions that leave the GPU usable as it is (drain_p2p: only peer-to-peer
# traffic has to stop); any other asked action means it cannot be used.
HARMLESS_ACTIONS = frozenset({"none", "drain_p2p"})
# Below this many degrees of thermal margin the GPU is about to slow down for heat.
THERMAL_MARGIN_C = 5.0
# An uncorrectable ECC count that grew keeps the device degraded this long after.
ECC_GROWTH_HOLD_S = 3600.0
# Dynamic page retirement (pre-Ampere NVIDIA) holds at most 64 pages; from this many
# on, the GPU is close to needing replacement.
RETIRED_PAGES_NEAR_LIMIT = 60.0

# Families whose 0 for a link that was 1 means "a link went down".
LINK_UP_FAMILIES = ("accel_nvlink_up", "accel_amd_xgmi_link_up")
# accel_ecc_errors_total's type label of uncorrectable errors (NVIDIA, AMD).
UNCORRECTABLE = frozenset({"uncorrected", "uncorrectable"})

Identity = tuple[str, ...]


# family -> (reason, state, test of the value and labels): the rules that look at one
# reading alone.
Test = Callable[[float, tuple[str, ...]], bool]
_SINGLE: dict[str, tuple[str, str, Test]] = {
    "accel_device_up": ("device_down", FAILED, lambda v, _l: v == 0),
    "accel_device_recovery_action": (
        "recovery_action",
        FAILED,
        lambda v, labels: v == 1 and labels[2] not in HARMLESS_ACTIONS,
    ),
    "accel_remapped_rows_failure": ("row_remap_failure", FAILED, lambda v, _l: v > 0),
    "accel_retired_pages_pending": ("retired_pages_pending", FAILED, lambda v, _l: v > 0),
    "accel_remapped_rows_pending": ("row_remap_pending", DEGRADED, lambda v, _l: v > 0),
    "accel_nvidia_fabric_health_issue": ("fabric_degraded", DEGRADED, lambda v, _l: v == 1),
    "accel_sram_ecc_threshold_exceeded": (
        "sram_ecc_threshold",
        PREDICTED,
        lambda v, _l: v == 1,
    ),
    "accel_temperature_margin_celsius": (
        "thermal_margin_low",
        DEGRADED,
        lambda v, _l: v < THERMAL_MARGIN_C,
    ),
}
_FAMILIES = frozenset(
    {*_SINGLE, *LINK_UP_FAMILIES, "accel_retired_pages", "accel_ecc_errors_total"}
)


@dataclass
class HealthJudge:
    """Derives the verdicts of one source's devices; remembers what the rules compare with."""

    clock: Callable[[], float] = time.monotonic
    # (family, labels) of the links seen up at least once.
    _links_up: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    # labels of an uncorrectable ECC counter -> the last count seen.
    _ecc: dict[tuple[str, ...], float] = field(default_factory=dict)
    # identity -> when its uncorrectable count last grew.
    _ecc_grew: dict[Identity, float] = field(default_factory=dict)

    def judge(self, readings: Sequence[Reading]) -> list[Reading]:
        """``readings`` followed by the health families of every device they report up or down."""
        now = self.clock()
        # A poll has thousands of readings and the rules read a few families.
        picked = [r for r in readings if r.metric in _FAMILIES]
        devices: dict[Identity, dict[str, str]] = {
            r.labels: {} for r in picked if r.metric == "accel_device_up"
        }
        retired: dict[Identity, float] = {}
        links_up, ecc = self._links_up, self._ecc
        for r in picked:
            metric, labels, value = r.metric, r.labels, r.value
            if not isinstance(value, float):  # device families are gauges and counters
                continue
            single = _SINGLE.get(metric)
            if single is not None:
                reason, state, test = single
                if test(value, labels):
                    reasons = devices.get(labels[:2])
                    if reasons is not None:
                        reasons[reason] = state
            elif metric == "accel_ecc_errors_total":
                if labels[2] in UNCORRECTABLE:
                    last = ecc.get(labels)
                    if last is not None and value > last:
                        self._ecc_grew[labels[:2]] = now
                    ecc[labels] = value
            elif metric == "accel_retired_pages":
                retired[labels[:2]] = retired.get(labels[:2], 0.0) + value
            else:  # a link: down after having been up
                key = (metric, labels)
                if value == 1:
                    links_up.add(key)
                elif key in links_up and labels[:2] in devices:
                    devices[labels[:2]]["link_down"] = DEGRADED
        out = list(readings)
        for ident, reasons in devices.items():
            grew = self._ecc_grew.get(ident)
            if grew is not None and now - grew < ECC_GROWTH_HOLD_S:
                reasons["ecc_uncorrected_growth"] = DEGRADED
            if retired.get(ident, 0.0) >= RETIRED_PAGES_NEAR_LIMIT:
                reasons["retired_pages_near_limit"] = PREDICTED
            out.extend(verdict(ident, reasons))
        return out


def verdict(ident: Identity, reasons: dict[str, str]) -> Iterable[Reading]:
    """The one-hot state and the reason series of one device."""
    worst = max(reasons.values(), key=_RANK.__getitem__, default=OK)
    for state in STATES:
        yield Reading("accel_device_health", (*ident, state), 1.0 if state == worst else 0.0)
    for reason in sorted(reasons):
        yield Reading("accel_device_health_reason_info", (*ident, reason), 1.0)
