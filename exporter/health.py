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


@dataclass
class _Device:
    reasons: dict[str, str] = field(default_factory=dict)
    retired_pages: float = 0.0


@dataclass
class HealthJudge:
    """Derives the verdicts of one source's devices; remembers what the rules compare with."""

    clock: Callable[[], float] = time.monotonic
    # (identity, family, link) seen up at least once.
    _links_up: set[tuple[Identity, str, str]] = field(default_factory=set)
    # (identity, type and counter labels) -> the last uncorrectable error count seen.
    _ecc: dict[tuple[Identity, tuple[str, ...]], float] = field(default_factory=dict)
    # identity -> when its uncorrectable count last grew.
    _ecc_grew: dict[Identity, float] = field(default_factory=dict)

    def judge(self, readings: Sequence[Reading]) -> list[Reading]:
        """``readings`` followed by the health families of every device they report up or down."""
        now = self.clock()
        devices: dict[Identity, _Device] = {}
        for r in readings:
            if r.metric == "accel_device_up":
                devices.setdefault(r.labels[:2], _Device())
        for r in readings:
            dev = devices.get(r.labels[:2])
            if dev is not None:
                self._apply(r, dev, now)
        out = list(readings)
        for ident, dev in devices.items():
            grew = self._ecc_grew.get(ident)
            if grew is not None and now - grew < ECC_GROWTH_HOLD_S:
                dev.reasons["ecc_uncorrected_growth"] = DEGRADED
            if dev.retired_pages >= RETIRED_PAGES_NEAR_LIMIT:
                dev.reasons["retired_pages_near_limit"] = PREDICTED
            out.extend(verdict(ident, dev.reasons))
        return out

    def _apply(self, r: Reading, dev: _Device, now: float) -> None:
        metric, value = r.metric, r.value
        if not isinstance(value, float):  # device families are gauges and counters
            return
        reasons = dev.reasons
        if metric == "accel_device_up":
            if value == 0:
                reasons["device_down"] = FAILED
        elif metric == "accel_device_recovery_action":
            if value == 1 and r.labels[2] not in HARMLESS_ACTIONS:
                reasons["recovery_action"] = FAILED
        elif metric == "accel_remapped_rows_failure":
            if value > 0:
                reasons["row_remap_failure"] = FAILED
        elif metric == "accel_retired_pages_pending":
            if value > 0:
                reasons["retired_pages_pending"] = FAILED
        elif metric == "accel_remapped_rows_pending":
            if value > 0:
                reasons["row_remap_pending"] = DEGRADED
        elif metric == "accel_retired_pages":
            dev.retired_pages += value
        elif metric in LINK_UP_FAMILIES:
            link = (r.labels[:2], metric, r.labels[2])
            if value == 1:
                self._links_up.add(link)
            elif link in self._links_up:
                reasons["link_down"] = DEGRADED
        elif metric == "accel_nvidia_fabric_health_issue":
            if value == 1:
                reasons["fabric_degraded"] = DEGRADED
        elif metric == "accel_temperature_margin_celsius":
            if value < THERMAL_MARGIN_C:
                reasons["thermal_margin_low"] = DEGRADED
        elif metric == "accel_ecc_errors_total" and r.labels[2] in UNCORRECTABLE:
            key = (r.labels[:2], r.labels[2:])
            last = self._ecc.get(key)
            if last is not None and value > last:
                self._ecc_grew[r.labels[:2]] = now
            self._ecc[key] = value


def verdict(ident: Identity, reasons: dict[str, str]) -> Iterable[Reading]:
    """The one-hot state and the reason series of one device."""
    worst = max(reasons.values(), key=_RANK.__getitem__, default=OK)
    for state in STATES:
        yield Reading("accel_device_health", (*ident, state), 1.0 if state == worst else 0.0)
    for reason in sorted(reasons):
        yield Reading("accel_device_health_reason_info", (*ident, reason), 1.0)
