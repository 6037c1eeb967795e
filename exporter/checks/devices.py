"""Checks about the accelerators themselves: count, temperature, memory health, XID errors.

Every check reads the daemon's metric families (``accel_device_info``,
``accel_device_up``, ``accel_temperature_celsius``, ``accel_ecc_errors_total``,
``accel_remapped_rows*``, ``accel_retired_pages*``, ``accel_xid_*``), so they
work the same for NVIDIA and AMD wherever the family exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.checks.nagios import Perf, Result, Status, worst
from exporter.checks.samples import Labels, Samples

# The ECC type label values that mean uncorrectable / correctable, for both vendors.
UNCORRECTED = frozenset({"uncorrected", "uncorrectable"})
CORRECTED = frozenset({"corrected", "correctable"})
# XIDs that mean failing hardware or a GPU that needs a reset (NVIDIA's XID catalog):
# 48 DBE, 61/62 internal micro-controller error, 63/64 page retirement/row remap event
# or failure, 74 NVLink error, 79 fallen off the bus, 92 high single-bit error rate,
# 94/95 contained/uncontained ECC error, 119/120 GSP error, 123 SPI failure, 140 ECC
# unrecovered. Others (13, 31, 43, 45: application faults) only warn.
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 123, 140})


@dataclass(frozen=True)
class Device:
    """A device as accel_device_info names it, with a short perfdata-safe label."""

    device: str
    uuid: str
    vendor: str
    label: str


def devices(samples: Samples, vendor: str = "") -> list[Device]:
    """Every device the daemon knows, optionally of one vendor, in index order.

    Labels are ``gpu<index>``, or ``<vendor><index>`` on a node with two vendors
    (whose indices overlap).
    """
    found = {
        labels.get("uuid", ""): (labels.get("device", ""), labels.get("vendor", ""))
        for labels, _ in samples.get("accel_device_info")
        if not vendor or labels.get("vendor") == vendor
    }
    mixed = len({v for _, v in found.values()}) > 1
    out = [
        Device(device, uuid, vend, f"{vend}{device}" if mixed else f"gpu{device}")
        for uuid, (device, vend) in found.items()
    ]
    return sorted(out, key=lambda d: (d.vendor, _index(d.device), d.uuid))


def _index(device: str) -> int:
    return int(device) if device.isdigit() else 1 << 30


def _by_uuid(items: Iterable[tuple[Labels, float]]) -> dict[str, list[tuple[Labels, float]]]:
    out: dict[str, list[tuple[Labels, float]]] = {}
    for labels, value in items:
        out.setdefault(labels.get("uuid", ""), []).append((labels, value))
    return out


def _unavailable_sources(samples: Samples) -> str:
    reasons = [
        f"{labels.get('source')}: {labels.get('reason')}"
        for labels, _ in samples.get("accel_exporter_source_unavailable_info")
    ]
    return f" (unavailable: {'; '.join(reasons)})" if reasons else ""


def _missing(what: str, missing_ok: bool) -> Result:
    if missing_ok:
        return Result(Status.OK, f"no {what} reported")
    return Result(Status.UNKNOWN, f"no {what} reported (not supported, or no data)")


def gpu_count(samples: Samples, expected: int, vendor: str = "") -> Result:
    """CRITICAL when fewer than ``expected`` devices are present or up; WARNING when more."""
    found = devices(samples, vendor)
    known = {d.uuid for d in found}
    up = {
        labels.get("uuid", "")
        for labels, value in samples.get("accel_device_up")
        if value == 1 and labels.get("uuid") in known
    }
    names = {d.uuid: d.label for d in found}
    down = [
        f"{names[labels.get('uuid', '')]} {labels.get('reason')}"
        for labels, _ in samples.get("accel_device_down_reason_info")
        if labels.get("uuid") in known
    ]
    text = f"{len(found)} of {expected} expected GPUs present, {len(up)} up"
    if down:
        text += "; down: " + ", ".join(sorted(down))
    if not found:
        text += _unavailable_sources(samples)
    if len(found) < expected or len(up) < expected:
        status = Status.CRITICAL
    elif len(found) > expected:
        status = Status.WARNING
    else:
        status = Status.OK
    perf = [
        Perf("gpus", len(found), crit=f"{expected}:", minimum=0),
        Perf("gpus_up", len(up), crit=f"{expected}:", minimum=0),
    ]
    return Result(status, text, perf)


def temperature(
    samples: Samples, warn: float, crit: float, sensor: str = "gpu", missing_ok: bool = False
) -> Result:
    """The hottest device's ``sensor`` against the thresholds (>= warn, >= crit)."""
    readings = _by_uuid(samples.get("accel_temperature_celsius", sensor=sensor))
    statuses, perf, hot = [], [], []
    for dev in devices(samples):
        values = readings.get(dev.uuid)
        if not values:
            continue
        value = max(v for _, v in values)
        status = (
            Status.CRITICAL if value >= crit else Status.WARNING if value >= warn else Status.OK
        )
        statuses.append(status)
        if status is not Status.OK:
            hot.append(f"{dev.label} {value:g}C")
        perf.append(Perf(f"{dev.label}_{sensor}", value, warn=f"{warn:g}", crit=f"{crit:g}"))
    if not perf:
        return _missing(f"{sensor} temperature", missing_ok)
    hottest = max(p.value for p in perf)
    text = f"hottest {sensor} sensor {hottest:g}C over {len(perf)} GPUs"
    if hot:
        text += "; at or above threshold: " + ", ".join(hot)
    return Result(worst(statuses), text, perf)


def ecc(
    samples: Samples,
    counter: str = "volatile",
    crit_uncorrected: float = 1,
    warn_corrected: float | None = None,
    missing_ok: bool = False,
) -> Result:
    """Uncorrectable ECC errors (CRITICAL), deferred or many correctable ones (WARNING).

    NVIDIA has a ``volatile`` (since driver load) and an ``aggregate`` (lifetime)
    counter; AMD has one (empty ``counter`` label), used whichever is asked.
    """
    per_device = _by_uuid(
        (labels, value)
        for labels, value in samples.get("accel_ecc_errors_total")
        if labels.get("counter", "") in (counter, "")
    )
    statuses, perf, notes = [], [], []
    for dev in devices(samples):
        values = per_device.get(dev.uuid)
        if not values:
            continue
        sums = {"uncorrected": 0.0, "corrected": 0.0, "deferred": 0.0}
        for labels, value in values:
            kind = labels.get("type", "")
            key = (
                "uncorrected" if kind in UNCORRECTED else "corrected" if kind in CORRECTED else kind
            )
            if key in sums:
                sums[key] += value
        status = Status.OK
        if sums["uncorrected"] >= crit_uncorrected:
            status = Status.CRITICAL
            notes.append(f"{dev.label} {sums['uncorrected']:g} uncorrectable")
        elif sums["deferred"] > 0 or (
            warn_corrected is not None and sums["corrected"] >= warn_corrected
        ):
            status = Status.WARNING
            notes.append(
                f"{dev.label} {sums['corrected']:g} correctable, {sums['deferred']:g} deferred"
            )
        statuses.append(status)
        perf.append(
            Perf(f"{dev.label}_uncorrected", sums["uncorrected"], crit=f"{crit_uncorrected:g}")
        )
        warn = "" if warn_corrected is None else f"{warn_corrected:g}"
        perf.append(Perf(f"{dev.label}_corrected", sums["corrected"], warn=warn))
    if not perf:
        return _missing("ECC counters", missing_ok)
    text = f"{len(perf) // 2} GPUs, {counter} counters"
    text += "; " + ", ".join(notes) if notes else ", no uncorrectable errors"
    return Result(worst(statuses), text, perf)


def _flags(samples: Samples, name: str) -> dict[str, float]:
    return {labels.get("uuid", ""): value for labels, value in samples.get(name)}


def row_remap(samples: Samples, missing_ok: bool = False) -> Result:
    """A failed remapping is CRITICAL (service the GPU); a pending one WARNING (reset it)."""
    failure = _flags(samples, "accel_remapped_rows_failure")
    pending = _flags(samples, "accel_remapped_rows_pending")
    rows = _by_uuid(samples.get("accel_remapped_rows"))
    statuses, perf, notes = [], [], []
    for dev in devices(samples):
        if dev.uuid not in failure and dev.uuid not in pending and dev.uuid not in rows:
            continue
        if failure.get(dev.uuid, 0) >= 1:
            statuses.append(Status.CRITICAL)
            notes.append(f"{dev.label} remapping failed")
        elif pending.get(dev.uuid, 0) >= 1:
            statuses.append(Status.WARNING)
            notes.append(f"{dev.label} remapping pending a GPU reset")
        else:
            statuses.append(Status.OK)
        for labels, value in sorted(rows.get(dev.uuid, []), key=lambda x: x[0].get("type", "")):
            perf.append(Perf(f"{dev.label}_{labels.get('type', '')}", value, minimum=0))
    if not statuses:
        return _missing("row remapping data", missing_ok)
    text = f"{len(statuses)} GPUs"
    text += "; " + ", ".join(notes) if notes else ", no pending or failed remappings"
    return Result(worst(statuses), text, perf)


def retired_pages(
    samples: Samples, warn: float = 30, crit: float = 60, missing_ok: bool = False
) -> Result:
    """Retired pages per GPU (a board can retire 64) against thresholds; pending warns."""
    pages = _by_uuid(samples.get("accel_retired_pages"))
    pending = _flags(samples, "accel_retired_pages_pending")
    statuses, perf, notes = [], [], []
    for dev in devices(samples):
        if dev.uuid not in pages and dev.uuid not in pending:
            continue
        total = sum(v for _, v in pages.get(dev.uuid, []))
        status = (
            Status.CRITICAL if total >= crit else Status.WARNING if total >= warn else Status.OK
        )
        if status is not Status.OK:
            notes.append(f"{dev.label} {total:g} pages retired")
        if pending.get(dev.uuid, 0) >= 1:
            status = worst([status, Status.WARNING])
            notes.append(f"{dev.label} retirement pending a reboot")
        statuses.append(status)
        perf.append(
            Perf(f"{dev.label}_retired", total, warn=f"{warn:g}", crit=f"{crit:g}", minimum=0)
        )
    if not statuses:
        return _missing("retired page data", missing_ok)
    text = f"{len(statuses)} GPUs"
    text += "; " + ", ".join(notes) if notes else ", no pages near the retirement limit"
    return Result(worst(statuses), text, perf)


def xid(
    samples: Samples,
    window: float,
    now: float,
    critical: frozenset[int] = CRITICAL_XIDS,
    ignore: frozenset[int] = frozenset(),
) -> Result:
    """XID errors seen within ``window`` seconds: CRITICAL for ``critical`` codes, else WARNING."""
    recent: dict[str, list[int]] = {}
    statuses = [Status.OK]
    for labels, stamp in samples.get("accel_xid_last_timestamp_seconds"):
        code = labels.get("xid", "")
        if not code.isdigit() or int(code) in ignore or now - stamp > window:
            continue
        recent.setdefault(labels.get("uuid", ""), []).append(int(code))
        statuses.append(Status.CRITICAL if int(code) in critical else Status.WARNING)
    names = {d.uuid: d.label for d in devices(samples)}
    parts = [
        f"{names.get(uuid, uuid)} xid {','.join(str(c) for c in sorted(codes))}"
        for uuid, codes in sorted(recent.items(), key=lambda kv: names.get(kv[0], kv[0]))
    ]
    count = sum(len(c) for c in recent.values())
    minutes = f"{window / 60:g}m" if window >= 60 else f"{window:g}s"
    text = f"{count} XID codes seen in the last {minutes}"
    if parts:
        text += ": " + "; ".join(parts)
    return Result(worst(statuses), text, [Perf("xid_codes", count, minimum=0)])
