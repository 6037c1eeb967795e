"""The ``exporter`` check: the daemon answers and every source is up."""

from __future__ import annotations

from exporter.checks.nagios import Perf, Result, Status
from exporter.checks.samples import Samples
from exporter.family_names import (
    ACCEL_DEVICES,
    ACCEL_EXPORTER_BUILD_INFO,
    ACCEL_EXPORTER_SOURCE_DOWN_REASON_INFO,
    ACCEL_EXPORTER_SOURCE_UNAVAILABLE_INFO,
    ACCEL_EXPORTER_SOURCE_UP,
    ACCEL_PCI_DEVICES,
)


def exporter_health(samples: Samples) -> Result:
    """OK when every source is up; WARNING naming the sources that are down and why."""
    up = {
        labels.get("source", ""): value for labels, value in samples.get(ACCEL_EXPORTER_SOURCE_UP)
    }
    if not up and not samples.has(ACCEL_EXPORTER_BUILD_INFO):
        return Result(Status.CRITICAL, "the endpoint does not serve accel-exporter metrics")
    reasons = {
        labels.get("source", ""): labels.get("reason", "")
        for labels, _ in samples.get(ACCEL_EXPORTER_SOURCE_DOWN_REASON_INFO)
    }
    unavailable = sorted(
        labels.get("source", "")
        for labels, _ in samples.get(ACCEL_EXPORTER_SOURCE_UNAVAILABLE_INFO)
    )
    down = sorted(name for name, value in up.items() if value != 1)
    healthy = len(up) - len(down)
    text = f"{healthy} of {len(up)} sources up"
    if down:
        text += "; down: " + ", ".join(f"{n} ({reasons.get(n) or 'unknown'})" for n in down)
    unseen = unseen_devices(samples)
    if unseen:
        # The PCI bus is the ground truth: a GPU node whose driver was never injected
        # has every source "up" (nvml merely unavailable) and would otherwise look fine.
        text += "; not seen by their library: " + ", ".join(unseen)
    if unavailable:
        text += "; unavailable here: " + ", ".join(unavailable)
    series = sum(len(v) for v in samples.by_name.values())
    perf = [
        Perf("sources_up", healthy, minimum=0, maximum=len(up)),
        Perf("sources_down", len(down), warn="0", minimum=0),
        Perf("sources_unavailable", len(unavailable), minimum=0),
        Perf("scrape", round(samples.fetch_seconds, 4), uom="s", minimum=0),
        Perf("samples", series, minimum=0),
    ]
    return Result(Status.WARNING if down or unseen else Status.OK, text, perf)


def unseen_devices(samples: Samples) -> list[str]:
    """``"nvidia 8 on the PCI bus, 0 seen"`` per vendor whose library sees fewer than the bus."""
    seen = {labels.get("vendor", ""): value for labels, value in samples.get(ACCEL_DEVICES)}
    out = []
    for labels, on_bus in samples.get(ACCEL_PCI_DEVICES):
        vendor = labels.get("vendor", "")
        if on_bus > seen.get(vendor, 0.0):
            out.append(f"{vendor} {on_bus:g} on the PCI bus, {seen.get(vendor, 0.0):g} seen")
    return sorted(out)
