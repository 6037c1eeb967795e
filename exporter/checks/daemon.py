"""The ``exporter`` check: the daemon answers and every source is up."""

from __future__ import annotations

from exporter.checks.nagios import Perf, Result, Status
from exporter.checks.samples import Samples


def exporter_health(samples: Samples) -> Result:
    """OK when every source is up; WARNING naming the sources that are down and why."""
    up = {
        labels.get("source", ""): value for labels, value in samples.get("accel_exporter_source_up")
    }
    if not up and not samples.has("accel_exporter_build_info"):
        return Result(Status.CRITICAL, "the endpoint does not serve accel-exporter metrics")
    reasons = {
        labels.get("source", ""): labels.get("reason", "")
        for labels, _ in samples.get("accel_exporter_source_down_reason_info")
    }
    unavailable = sorted(
        labels.get("source", "")
        for labels, _ in samples.get("accel_exporter_source_unavailable_info")
    )
    down = sorted(name for name, value in up.items() if value != 1)
    healthy = len(up) - len(down)
    text = f"{healthy} of {len(up)} sources up"
    if down:
        text += "; down: " + ", ".join(f"{n} ({reasons.get(n) or 'unknown'})" for n in down)
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
    return Result(Status.WARNING if down else Status.OK, text, perf)
