"""What one exposition costs: samples, bytes, families, label widths, series by source."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def measure(text: str) -> dict[str, Any]:
    """Samples (lines that are not comments), bytes, families by samples, the widest
    series, and the daemon's own ``accel_exporter_series`` by source."""
    per_family: Counter[str] = Counter()
    widest, widest_family = 0, ""
    by_source: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            per_family[family.name] += 1
            if len(sample.labels) > widest:
                widest, widest_family = len(sample.labels), family.name
            if sample.name == "accel_exporter_series":
                by_source[sample.labels["source"]] = sample.value
    return {
        "samples": sum(per_family.values()),
        "bytes": len(text.encode()),
        "families": len(per_family),
        "max_labels": widest,
        "widest_family": widest_family,
        "series_by_source": by_source,
        "top_families": dict(per_family.most_common(8)),
    }


def settled(
    metrics: Callable[[], str], pause: float = 1.5, quiet: int = 2, timeout: float = 90.0
) -> str:
    """The exposition once its sample count has not changed for ``quiet`` scrapes in a
    row, ``pause`` seconds apart (slow polls, partitions and rates have all arrived)."""
    deadline = time.monotonic() + timeout
    last, same = -1, 0
    while True:
        text = metrics()
        count = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        same = same + 1 if count == last else 0
        if same >= quiet or time.monotonic() > deadline:
            return text
        last = count
        time.sleep(pause)
