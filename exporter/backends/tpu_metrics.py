"""Values out of one libtpu ``MetricResponse``, checked: nothing the service sends is trusted.

A response holds one ``TPUMetric`` whose ``metrics`` are per-device points: an
``Attribute`` naming the device (``int_attr``, or a key-value list with
``device_ordinal`` / ``device-id`` as a string or an int: libtpu changed the
type between releases) and a gauge. Anything else (no device, a device id out
of range or repeated, a string or bool gauge, a value not finite, negative or
above its bound) rejects the whole metric from that address with a reason:
exporting part of a response that is wrong somewhere could be a wrong number.
"""

from __future__ import annotations

import math
from typing import Any

from exporter.backends.contract import within

# A response may describe at most this many devices (a v5p pod slice host has 4;
# a 7x host 8): more is a malformed or hostile reply, not a bigger host.
MAX_POINTS = 1024
_DEVICE_KEYS = ("device_ordinal", "device-id", "device_id", "device")


class BadMetric(ValueError):
    """A response that does not have the documented shape; the message says where."""


def _device_of(attribute: Any) -> int:
    value = attribute.value
    kind = value.WhichOneof("attr")
    if kind == "int_attr":
        return int(value.int_attr)
    if kind == "string_attr" and value.string_attr.isdigit():
        return int(value.string_attr)
    if kind == "kvlist_attr":
        for item in value.kvlist_attr.attributes:
            if item.key in _DEVICE_KEYS:
                return _device_of(item)
    raise BadMetric(f"a point names no device (attribute {attribute.key!r} holds {kind})")


def _number(point: Any) -> float:
    kind = point.WhichOneof("measure")
    if kind == "gauge":
        held = point.gauge.WhichOneof("value")
        if held == "as_int":
            return float(point.gauge.as_int)
        if held == "as_double":
            return float(point.gauge.as_double)
        raise BadMetric(f"a gauge holds {held or 'nothing'}, not a number")
    if kind == "counter":
        held = point.counter.WhichOneof("value")
        if held in ("as_int", "as_double"):
            return float(getattr(point.counter, held))
    raise BadMetric(f"a point holds a {kind or 'no measure'}, not a number")


def device_values(
    response: Any, name: str, devices: int, upper: float = math.inf
) -> dict[int, float]:
    """``{runtime device id: value}`` of metric ``name``; BadMetric when anything is off.

    ``devices`` bounds the device ids (the runtime devices of the host's chips);
    ``upper`` the values (100 for a percentage).
    """
    metric = response.metric
    if metric.name and metric.name != name:
        raise BadMetric(f"asked for {name}, the service answered {metric.name!r}")
    points = metric.metrics
    if len(points) > MAX_POINTS:
        raise BadMetric(f"{len(points)} points, more than {MAX_POINTS}")
    out: dict[int, float] = {}
    for point in points:
        device = _device_of(point.attribute)
        if not 0 <= device < devices:
            raise BadMetric(f"device {device} is not one of the host's {devices}")
        if device in out:
            raise BadMetric(f"device {device} appears twice")
        value = _number(point)
        if not within(value, 0, upper):
            raise BadMetric(f"device {device} has {value}, outside 0..{upper:g}")
        out[device] = value
    return out
