"""Checks about the accelerators: count, temperature, memory, XID and AFID errors, health.

Every check but ``health`` reads the daemon's metric families (``accel_device_info``,
``accel_device_up``, ``accel_temperature_celsius``, ``accel_ecc_errors_total``,
``accel_remapped_rows*``, ``accel_retired_pages*``, ``accel_xid_*``, ``accel_amd_afid_*``), so they
work the same for NVIDIA and AMD wherever the family exists. ``health`` reads the
verdict records themselves, as ``/v1/devices`` serves them (docs/health-api.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from exporter import vendors
from exporter.checks.nagios import Perf, Result, Status, worst
from exporter.checks.samples import Labels, Samples
from exporter.family_names import (
    ACCEL_AMD_AFID_ERRORS_TOTAL,
    ACCEL_AMD_AFID_INFO,
    ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
    ACCEL_DEVICE_DOWN_REASON_INFO,
    ACCEL_DEVICE_INFO,
    ACCEL_DEVICE_UP,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_EXPORTER_SOURCE_UNAVAILABLE_INFO,
    ACCEL_EXPORTER_SOURCE_UP,
    ACCEL_REMAPPED_ROWS,
    ACCEL_REMAPPED_ROWS_FAILURE,
    ACCEL_REMAPPED_ROWS_PENDING,
    ACCEL_RETIRED_PAGES,
    ACCEL_RETIRED_PAGES_PENDING,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_XID_LAST_TIMESTAMP_SECONDS,
)

# The vendor label of accel_device_info, as every device source sets it.
VENDORS = tuple(vendor.label for vendor in vendors.VENDORS)
# Names a user may reach for first -> the vendor label (a typo is suggested the same way).
VENDOR_SYNONYMS = {
    "gaudi": "intel_gaudi",
    "habana": "intel_gaudi",
    "hpu": "intel_gaudi",
    "tpu": "google",
    "neuron": "aws",
    "trainium": "aws",
    "inferentia": "aws",
}

# The ECC type label values that mean uncorrectable / correctable: this daemon's one
# vocabulary, and the words a daemon released before it used on AMD (a check may read an
# older daemon's /metrics during a rolling upgrade).
UNCORRECTED = frozenset({"uncorrected", "uncorrectable"})
CORRECTED = frozenset({"corrected", "correctable"})


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
        for labels, _ in samples.get(ACCEL_DEVICE_INFO)
        if not vendor or labels.get("vendor") == vendor
    }
    return _named(found)


def _named(found: dict[str, tuple[str, str]]) -> list[Device]:
    """Uuid -> (device label, vendor) as :class:`Device` entries, labelled, in index order."""
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
        for labels, _ in samples.get(ACCEL_EXPORTER_SOURCE_UNAVAILABLE_INFO)
    ]
    return f" (unavailable: {'; '.join(reasons)})" if reasons else ""


def _missing(what: str, missing_ok: bool) -> Result:
    if missing_ok:
        return Result(Status.OK, f"no {what} reported")
    return Result(Status.UNKNOWN, f"no {what} reported (not supported, or no data)")


@dataclass(frozen=True)
class Verdict:
    """What a per-device check concludes about one device."""

    status: Status
    perf: list[Perf]
    note: str = ""


def _per_device(
    samples: Samples,
    judge: Callable[[Device], Verdict | None],
    what: str,
    calm: str,
    missing_ok: bool,
    head: Callable[[list[Verdict]], str] = lambda verdicts: f"{len(verdicts)} GPUs",
) -> Result:
    """Judge every device that reports the quantity; UNKNOWN (or OK) when none does.

    The text is ``head`` plus the notes of the devices that are not OK, or ``calm``.
    """
    verdicts = [v for v in (judge(dev) for dev in devices(samples)) if v is not None]
    if not verdicts:
        return _missing(what, missing_ok)
    notes = [v.note for v in verdicts if v.note]
    text = head(verdicts) + ("; " + ", ".join(notes) if notes else f", {calm}")
    perf = [item for v in verdicts for item in v.perf]
    return Result(worst([v.status for v in verdicts]), text, perf)


def _level(value: float, warn: float | None, crit: float | None) -> Status:
    """Nagios range semantics: a threshold ``T`` (range ``0:T``) alerts when value > T."""
    if crit is not None and value > crit:
        return Status.CRITICAL
    if warn is not None and value > warn:
        return Status.WARNING
    return Status.OK


def gpu_count(samples: Samples, expected: int, vendor: str = "") -> Result:
    """CRITICAL when fewer than ``expected`` devices are present or up; WARNING when more."""
    found = devices(samples, vendor)
    known = {d.uuid for d in found}
    up = {
        labels.get("uuid", "")
        for labels, value in samples.get(ACCEL_DEVICE_UP)
        if value == 1 and labels.get("uuid") in known
    }
    names = {d.uuid: d.label for d in found}
    down = [
        f"{names[labels.get('uuid', '')]} {labels.get('reason')}"
        for labels, _ in samples.get(ACCEL_DEVICE_DOWN_REASON_INFO)
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
    """Each device's ``sensor`` against the thresholds (above warn, above crit)."""
    readings = _by_uuid(samples.get(ACCEL_TEMPERATURE_CELSIUS, sensor=sensor))

    def judge(dev: Device) -> Verdict | None:
        values = readings.get(dev.uuid)
        if not values:
            return None
        value = max(v for _, v in values)
        status = _level(value, warn, crit)
        note = f"{dev.label} {value:g}C" if status is not Status.OK else ""
        perf = Perf(f"{dev.label}_{sensor}", value, warn=f"{warn:g}", crit=f"{crit:g}")
        return Verdict(status, [perf], note)

    def head(verdicts: list[Verdict]) -> str:
        hottest = max(p.value for v in verdicts for p in v.perf if p.value is not None)
        return f"hottest {sensor} sensor {hottest:g}C over {len(verdicts)} GPUs"

    what = f"{sensor} temperature"
    return _per_device(samples, judge, what, "none at a threshold", missing_ok, head)


def ecc(
    samples: Samples,
    counter: str = "volatile",
    crit_uncorrected: float = 0,
    warn_corrected: float | None = None,
    missing_ok: bool = False,
) -> Result:
    """Uncorrectable ECC errors (CRITICAL), deferred or many correctable ones (WARNING).

    NVIDIA has a ``volatile`` (since driver load) and an ``aggregate`` (lifetime)
    counter; AMD has one (empty ``counter`` label), used whichever is asked.
    """
    per_device = _by_uuid(
        (labels, value)
        for labels, value in samples.get(ACCEL_ECC_ERRORS_TOTAL)
        if labels.get("counter", "") in (counter, "")
    )

    def judge(dev: Device) -> Verdict | None:
        values = per_device.get(dev.uuid)
        if not values:
            return None
        sums = {"uncorrected": 0.0, "corrected": 0.0, "deferred": 0.0}
        for labels, value in values:
            kind = labels.get("type", "")
            key = (
                "uncorrected" if kind in UNCORRECTED else "corrected" if kind in CORRECTED else kind
            )
            if key in sums:
                sums[key] += value
        perf = [
            Perf(f"{dev.label}_uncorrected", sums["uncorrected"], crit=f"{crit_uncorrected:g}"),
            Perf(
                f"{dev.label}_corrected",
                sums["corrected"],
                warn="" if warn_corrected is None else f"{warn_corrected:g}",
            ),
        ]
        if _level(sums["uncorrected"], None, crit_uncorrected) is Status.CRITICAL:
            note = f"{dev.label} {sums['uncorrected']:g} uncorrectable"
            return Verdict(Status.CRITICAL, perf, note)
        if (
            sums["deferred"] > 0
            or _level(sums["corrected"], warn_corrected, None) is Status.WARNING
        ):
            note = f"{dev.label} {sums['corrected']:g} correctable, {sums['deferred']:g} deferred"
            return Verdict(Status.WARNING, perf, note)
        return Verdict(Status.OK, perf)

    def head(verdicts: list[Verdict]) -> str:
        return f"{len(verdicts)} GPUs, {counter} counters"

    return _per_device(samples, judge, "ECC counters", "no uncorrectable errors", missing_ok, head)


def _flags(samples: Samples, name: str) -> dict[str, float]:
    return {labels.get("uuid", ""): value for labels, value in samples.get(name)}


def row_remap(samples: Samples, missing_ok: bool = False) -> Result:
    """A failed remapping is CRITICAL (service the GPU); a pending one WARNING (reset it)."""
    failure = _flags(samples, ACCEL_REMAPPED_ROWS_FAILURE)
    pending = _flags(samples, ACCEL_REMAPPED_ROWS_PENDING)
    rows = _by_uuid(samples.get(ACCEL_REMAPPED_ROWS))

    def judge(dev: Device) -> Verdict | None:
        if dev.uuid not in failure and dev.uuid not in pending and dev.uuid not in rows:
            return None
        perf = [
            Perf(f"{dev.label}_{labels.get('type', '')}", value, minimum=0)
            for labels, value in sorted(rows.get(dev.uuid, []), key=lambda x: x[0].get("type", ""))
        ]
        if failure.get(dev.uuid, 0) >= 1:
            return Verdict(Status.CRITICAL, perf, f"{dev.label} remapping failed")
        if pending.get(dev.uuid, 0) >= 1:
            return Verdict(Status.WARNING, perf, f"{dev.label} remapping pending a GPU reset")
        return Verdict(Status.OK, perf)

    calm = "no pending or failed remappings"
    return _per_device(samples, judge, "row remapping data", calm, missing_ok)


def retired_pages(
    samples: Samples, warn: float = 30, crit: float = 60, missing_ok: bool = False
) -> Result:
    """Retired pages per GPU (a board can retire 64) against thresholds; pending warns."""
    pages = _by_uuid(samples.get(ACCEL_RETIRED_PAGES))
    pending = _flags(samples, ACCEL_RETIRED_PAGES_PENDING)

    def judge(dev: Device) -> Verdict | None:
        if dev.uuid not in pages and dev.uuid not in pending:
            return None
        total = sum(v for _, v in pages.get(dev.uuid, []))
        status = _level(total, warn, crit)
        notes = [f"{dev.label} {total:g} pages retired"] if status is not Status.OK else []
        if pending.get(dev.uuid, 0) >= 1:
            status = worst([status, Status.WARNING])
            notes.append(f"{dev.label} retirement pending a reboot")
        perf = Perf(f"{dev.label}_retired", total, warn=f"{warn:g}", crit=f"{crit:g}", minimum=0)
        return Verdict(status, [perf], ", ".join(notes))

    calm = "no pages near the retirement limit"
    return _per_device(samples, judge, "retired page data", calm, missing_ok)


def xid(
    samples: Samples,
    window: float,
    now: float,
    critical: frozenset[int] | None = None,
    ignore: frozenset[int] = frozenset(),
    local: bool = False,
) -> Result:
    """XID errors seen within ``window`` seconds: CRITICAL for ``critical`` codes, else WARNING.

    ``critical`` defaults to the catalog's ``CRITICAL_XIDS``.

    UNKNOWN when the NVML source is not up (nothing reads XIDs there, so "none seen"
    would be a guess). ``local``: the samples come from one poll in this process,
    which sees only the events of that poll, so no window is claimed.
    """
    unread = _source_not_up(samples, "nvml", "XIDs")
    if unread is not None:
        return unread
    if critical is None:
        from exporter.catalog.nvidia import CRITICAL_XIDS

        critical = CRITICAL_XIDS
    recent = _recent_codes(
        samples,
        ACCEL_XID_LAST_TIMESTAMP_SECONDS,
        "xid",
        window,
        now,
        ignore,
        lambda _uuid, code: "critical" if code in critical else "",
    )
    return _codes_result(
        samples, recent, window, "xid", "XID codes", "xid_codes", notes=False, local=local
    )


def _source_not_up(samples: Samples, source: str, what: str) -> Result | None:
    """UNKNOWN when ``source`` (the only reader of ``what``) is not up: "none seen" would lie."""
    up = [
        v for labels, v in samples.get(ACCEL_EXPORTER_SOURCE_UP) if labels.get("source") == source
    ]
    if up and up[0] == 1:
        return None
    state = "down" if up else "not running"
    return Result(Status.UNKNOWN, f"{what} cannot be read: the {source} source is {state} here")


def _recent_codes(
    samples: Samples,
    family: str,
    label: str,
    window: float,
    now: float,
    ignore: frozenset[int],
    severity: Callable[[str, int], str],
) -> dict[str, list[tuple[int, str]]]:
    """Codes last seen within ``window``: uuid -> [(code, why CRITICAL, "" for WARNING)]."""
    recent: dict[str, list[tuple[int, str]]] = {}
    for labels, stamp in samples.get(family):
        code, uuid = labels.get(label, ""), labels.get("uuid", "")
        if not code.isdigit() or int(code) in ignore or now - stamp > window:
            continue
        recent.setdefault(uuid, []).append((int(code), severity(uuid, int(code))))
    return recent


def _codes_result(
    samples: Samples,
    recent: dict[str, list[tuple[int, str]]],
    window: float,
    word: str,
    noun: str,
    perf: str,
    notes: bool,
    local: bool = False,
) -> Result:
    statuses = [Status.OK]
    statuses += [
        Status.CRITICAL if why else Status.WARNING for v in recent.values() for _, why in v
    ]
    names = {d.uuid: d.label for d in devices(samples)}
    parts = [
        f"{names.get(uuid, uuid)} {word} "
        + ",".join(f"{c} ({why})" if why and notes else str(c) for c, why in sorted(codes))
        for uuid, codes in sorted(recent.items(), key=lambda kv: names.get(kv[0], kv[0]))
    ]
    count = sum(len(c) for c in recent.values())
    if local:
        text = f"{count} {noun} seen during one local poll (no history; ask the daemon for one)"
    else:
        minutes = f"{window / 60:g}m" if window >= 60 else f"{window:g}s"
        text = f"{count} {noun} seen in the last {minutes}"
    if parts:
        text += ": " + "; ".join(parts)
    return Result(worst(statuses), text, [Perf(perf, count, minimum=0)])


# The table severities that page (AMD's Fail-to-init is a boot that failed), and those that
# leave the record's word to decide (the decoder's ALL, no table naming the AFID).
_TABLE_FATAL = ("fatal", "fail_to_init")
_UNCLASSIFIED = ("any", "unknown")


def afid(
    samples: Samples,
    window: float,
    now: float,
    ignore: frozenset[int] = frozenset(),
    critical: frozenset[int] = frozenset(),
) -> Result:
    """AMD AFIDs recorded within ``window`` seconds.

    CRITICAL for an AFID that is fatal by AMD's table (``accel_amd_afid_info``:
    fatal or fail_to_init), for one the table does not classify that was recorded
    with fatal severity (the last-seen time is per AFID, so it counts as fatal when
    it is seen again), or one listed in ``critical``; else WARNING; UNKNOWN when the
    amdsmi source (which reads them) is not up. The shipped alert
    ``AccelAmdFatalAfid`` has the same rule.
    """
    unread = _source_not_up(samples, "amdsmi", "AFIDs")
    if unread is not None:
        return unread
    table = {
        (labels.get("uuid", ""), labels.get("afid", "")): labels.get("severity", "")
        for labels, _one in samples.get(ACCEL_AMD_AFID_INFO)
    }
    recorded = {
        (labels.get("uuid", ""), labels.get("afid", ""))
        for labels, count in samples.get(ACCEL_AMD_AFID_ERRORS_TOTAL)
        if labels.get("severity") == "fatal" and count > 0
    }
    fatal = {key for key, severity in table.items() if severity in _TABLE_FATAL} | {
        key for key in recorded if table.get(key, "unknown") in _UNCLASSIFIED
    }
    recent = _recent_codes(
        samples,
        ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
        "afid",
        window,
        now,
        ignore,
        lambda uuid, code: (
            "fatal" if (uuid, str(code)) in fatal else "critical" if code in critical else ""
        ),
    )
    return _codes_result(samples, recent, window, "afid", "AFIDs", "afids", notes=True)


# A verdict's state -> the check status (predicted_failure: plan, not page).
HEALTH_STATUS = {
    "ok": Status.OK,
    "predicted_failure": Status.WARNING,
    "degraded": Status.WARNING,
    "failed": Status.CRITICAL,
}


def health(samples: Samples, missing_ok: bool = False) -> Result:
    """Each device's verdict record (docs/health.md), with the reasons of the others.

    Read from the ``/v1/devices`` entries (``samples.devices``): failed is CRITICAL;
    degraded and predicted_failure are WARNING; degraded is CRITICAL when the recommended
    action is a person's (service, inspect_hardware, contact_vendor, replace_device: no
    reset or reboot clears it), predicted_failure stays WARNING (plan, not page); a
    device the exporter cannot vouch for (its worker down or restarting, its source
    reloading or stale, no verdict yet) is UNKNOWN, with why (the Nagios convention:
    the state cannot be told). A device not ok names its recommended action
    (``-> reset_device``) when it has one.
    """
    entries: dict[str, dict[str, Any]] = {}
    for entry in samples.devices or []:
        uuid = entry.get("uuid")
        if isinstance(uuid, str):
            entries[uuid] = entry
    named = {u: (str(e.get("device", "")), str(e.get("vendor", ""))) for u, e in entries.items()}
    verdicts = [_health_verdict(dev, entries[dev.uuid]) for dev in _named(named)]
    if not verdicts:
        return _missing("health verdict", missing_ok)
    notes = [v.note for v in verdicts if v.note]
    text = f"{len(verdicts)} GPUs" + ("; " + ", ".join(notes) if notes else ", all ok")
    perf = [item for v in verdicts for item in v.perf]
    return Result(worst([v.status for v in verdicts]), text, perf)


def _person_actions() -> frozenset[str]:
    """The actions a person carries out (exporter.actions), imported on first need.

    The action vocabulary imports the whole catalog; a node whose devices all ask for
    no action (the usual answer, every interval on every node) never needs it.
    """
    from exporter.actions import PERSON_ACTIONS

    return PERSON_ACTIONS


def _health_verdict(dev: Device, entry: dict[str, Any]) -> Verdict:
    """One device's status from its ``/v1/devices`` entry."""
    state = entry.get("verdict")
    action = entry.get("recommended_action") or "none"
    todo = f" -> {action}" if action != "none" else ""
    if entry.get("health") not in ("Healthy", "Unhealthy") or state not in HEALTH_STATUS:
        # Unknown: no state holds. The message says why, and what the remembered
        # findings ask for (``remembered xid_79; recommended action: reboot_node``).
        why = str(entry.get("message") or "no verdict")
        perf = Perf(f"{dev.label}_health", None, warn="0", crit="2", minimum=0)
        return Verdict(Status.UNKNOWN, [perf], f"{dev.label} unknown ({why})")
    status = HEALTH_STATUS[state]
    if action != "none" and action in _person_actions() and state != "predicted_failure":
        # A person must act (service, inspect the hardware, call the vendor, replace the
        # part): no reset or reboot clears it, so it pages; a predicted failure asking
        # one (retired pages near the limit) is planned, not paged: it warns.
        status = Status.CRITICAL
    note = ""
    if status is not Status.OK:
        reasons = [
            str(r.get("reason", ""))
            for r in entry.get("reasons") or []
            if isinstance(r, dict) and r.get("state")  # a health reason, not an action alone
        ]
        note = f"{dev.label} {state} ({','.join(sorted(reasons)) or 'no reason given'}){todo}"
    value = list(HEALTH_STATUS).index(state)
    perf = Perf(f"{dev.label}_health", value, warn="0", crit="2", minimum=0)
    return Verdict(status, [perf], note)
