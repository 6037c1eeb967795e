"""libtpu's latency distributions folded into the exporter's fixed buckets. Pure.

The service describes each distribution with its own bucket layout
(exponential, linear or explicit bounds, in microseconds) plus an underflow
and an overflow bucket. A Prometheus or OTLP histogram needs bounds fixed for
the family, so each of the service's buckets is added to the first fixed
bucket whose bound is at or above the service bucket's upper bound: a count is
never placed below where it could belong (a bucket straddling a fixed bound
counts above it). The count and sum are the service's own.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import Any

from exporter.backend_api.tpu import MAX_LABEL
from exporter.backends.tpu_metrics import BadMetric

# Buckets one distribution's layout may have (its points and labels: backend_api.tpu).
MAX_BUCKETS = 4096


def upper_bounds(options: Any) -> list[float]:
    """The finite upper bounds (service units) of the layout; BadMetric when unusable."""
    layout = options.WhichOneof("options")
    if layout == "exponential_buckets":
        e = options.exponential_buckets
        n, growth, scale = e.num_finite_buckets, e.growth_factor, e.scale
        if not (0 < n <= MAX_BUCKETS and growth > 1 and scale > 0):
            raise BadMetric(f"exponential buckets n={n} growth={growth} scale={scale}")
        # bucket 0 is the underflow (< scale); finite bucket i ends at scale * growth^i
        try:
            return [scale * growth**i for i in range(n + 1)]
        except OverflowError:
            raise BadMetric(f"exponential buckets overflow (growth {growth}, {n})") from None
    if layout == "linear_buckets":
        lin = options.linear_buckets
        n, width, offset = lin.num_finite_buckets, lin.width, lin.offset
        if not (0 < n <= MAX_BUCKETS and width > 0 and math.isfinite(offset)):
            raise BadMetric(f"linear buckets n={n} width={width} offset={offset}")
        return [offset + width * i for i in range(n + 1)]
    if layout == "explicit_buckets":
        bounds = list(options.explicit_buckets.bounds)
        if (
            not 0 < len(bounds) <= MAX_BUCKETS
            or not all(map(math.isfinite, bounds))
            or any(b >= c for b, c in itertools.pairwise(bounds))
        ):
            raise BadMetric("explicit bounds are not finite and increasing")
        return bounds
    raise BadMetric(f"a distribution with {layout or 'no'} bucket layout")


def fold(
    distribution: Any, unit_seconds: float, fixed: Sequence[float]
) -> tuple[tuple[int, ...], float]:
    """(cumulative counts over ``fixed`` plus +Inf, sum in seconds); BadMetric when inconsistent."""
    bounds = upper_bounds(distribution.bucket_options)
    counts = list(distribution.bucket_counts)
    if len(counts) > len(bounds) + 1:
        raise BadMetric(f"{len(counts)} bucket counts for {len(bounds) + 1} buckets")
    if any(c < 0 for c in counts):
        raise BadMetric("a negative bucket count")
    total = distribution.count
    if sum(counts) != total:
        raise BadMetric(f"bucket counts add up to {sum(counts)}, the count says {total}")
    mean = distribution.mean
    if not math.isfinite(mean) or mean < 0:
        raise BadMetric(f"mean {mean}")
    per_bucket = [0] * (len(fixed) + 1)
    for i, count in enumerate(counts):
        if not count:
            continue
        upper = bounds[i] * unit_seconds if i < len(bounds) else math.inf
        per_bucket[bisect.bisect_left(fixed, upper)] += count
    running, cumulative = 0, []
    for count in per_bucket:
        running += count
        cumulative.append(running)
    return tuple(cumulative), mean * total * unit_seconds


def label_of(attribute: Any, key: str) -> str:
    """A string attribute ``key`` of a point (in a key-value list or itself), "" when absent."""
    value = attribute.value
    pairs = value.kvlist_attr.attributes if value.WhichOneof("attr") == "kvlist_attr" else []
    for item in [attribute, *pairs]:
        if item.key == key:
            held = item.value.WhichOneof("attr")
            if held == "string_attr":
                return str(item.value.string_attr)[:MAX_LABEL]
            if held == "int_attr":
                return str(item.value.int_attr)
            raise BadMetric(f"{key} holds {held}")
    return ""
