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

# AMD: an AFID recorded within this long makes the GPU failed (fatal) or degraded.
AFID_WINDOW_S = 3600.0
# AMD: from this share of the driver's bad-page threshold on, the GPU is close to
# being declared bad (the NVIDIA 64-page limit does not apply: the threshold is per GPU).
BAD_PAGES_NEAR_SHARE = 0.9

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
# AMD families: AFIDs from CPER records, and the bad-page counts and threshold.
_AMD = frozenset(
    {
        "accel_amd_afid_errors_total",
        "accel_amd_afid_last_timestamp_seconds",
        "accel_amd_bad_pages",
        "accel_amd_bad_page_threshold",
    }
)
_FAMILIES = frozenset(
    {*_SINGLE, *LINK_UP_FAMILIES, *_AMD, "accel_retired_pages", "accel_ecc_errors_total"}
)


@dataclass
class HealthJudge:
    """Derives the verdicts of one source's devices; remembers what the rules compare with."""

    clock: Callable[[], float] = time.monotonic
    # Unix time, to compare with the timestamps devices report (AFIDs).
    wall: Callable[[], float] = time.time
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
        amd: list[Reading] = []
        links_up, ecc = self._links_up, self._ecc
        for r in picked:
            if r.metric in _AMD:
                amd.append(r)
                continue
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
        amd_rules = _amd_reasons(amd, retired, self.wall())
        out = list(readings)
        for ident, reasons in devices.items():
            grew = self._ecc_grew.get(ident)
            if grew is not None and now - grew < ECC_GROWTH_HOLD_S:
                reasons["ecc_uncorrected_growth"] = DEGRADED
            found = amd_rules.get(ident)
            if found is not None:
                # AMD bad pages: pending ones are retired at the next reset and the
                # limit is the driver's threshold, so AMD's own rules replace the
                # NVIDIA ones the shared retired-page families would trigger.
                reasons.pop("retired_pages_pending", None)
                reasons.update(found)
            elif retired.get(ident, 0.0) >= RETIRED_PAGES_NEAR_LIMIT:
                reasons["retired_pages_near_limit"] = PREDICTED
            out.extend(verdict(ident, reasons))
        return out


def _amd_reasons(
    readings: Iterable[Reading], retired: dict[Identity, float], now: float
) -> dict[Identity, dict[str, str]]:
    """The AMD rules, by device: AFIDs within the window, bad pages against the threshold.

    Only devices with AMD bad-page or AFID readings have an entry (an empty one
    still marks a device whose bad pages AMD's rules judge).
    """
    fatal: set[tuple[str, ...]] = set()
    last: list[tuple[tuple[str, ...], float]] = []
    pending: dict[Identity, float] = {}
    threshold: dict[Identity, float] = {}
    out: dict[Identity, dict[str, str]] = {}
    for r in readings:
        if not isinstance(r.value, float):
            continue
        ident = r.labels[:2]
        if r.metric == "accel_amd_afid_errors_total":
            if r.labels[3] == "fatal" and r.value > 0:
                fatal.add(r.labels[:3])
        elif r.metric == "accel_amd_afid_last_timestamp_seconds":
            last.append((r.labels[:3], r.value))
        elif r.metric == "accel_amd_bad_pages":
            out.setdefault(ident, {})
            if r.labels[2] == "pending":
                pending[ident] = r.value
        else:  # accel_amd_bad_page_threshold
            out.setdefault(ident, {})
            threshold[ident] = r.value
    for key, stamp in last:
        if now - stamp < AFID_WINDOW_S:
            reasons = out.setdefault(key[:2], {})
            if key in fatal:
                reasons["afid_fatal"] = FAILED
            else:
                reasons["afid_recent"] = DEGRADED
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


def verdict(ident: Identity, reasons: dict[str, str]) -> Iterable[Reading]:
    """The one-hot state and the reason series of one device."""
    worst = max(reasons.values(), key=_RANK.__getitem__, default=OK)
    for state in STATES:
        yield Reading("accel_device_health", (*ident, state), 1.0 if state == worst else 0.0)
    for reason in sorted(reasons):
        yield Reading("accel_device_health_reason_info", (*ident, reason), 1.0)
