"""A device backend's poll reply as the daemon reads it, for backend tests.

The reply is sent through the real frame encoding and parsed by the daemon's
own ``parse_readings``, with the devices the reply lists (in inventory order,
``device`` = the position, as both backends number them).
"""

from __future__ import annotations

from typing import Any

from exporter.model import Reading
from exporter.sources.device import DeviceId, parse_readings
from exporter.workers.protocol import decode, encode


def reply_readings(reply: dict[str, Any]) -> list[Reading]:
    """Every reading of a poll reply (fast and slow), as the daemon would parse it."""
    reply = decode(encode({"type": "result", "result": reply})[4:])["result"]  # as on the wire
    devices = [DeviceId(str(i), d["uuid"], ()) for i, d in enumerate(reply["devices"])]
    readings = parse_readings(reply["readings"], devices, "readings")
    readings += parse_readings(reply.get("slow_readings", {}), devices, "slow_readings")
    return readings


def reply_values(reply: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    """``{(metric, labels): value}`` of a poll reply; a series twice is an error."""
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for r in reply_readings(reply):
        key = (r.metric, r.labels)
        assert key not in out, f"duplicate series {key}"
        assert isinstance(r.value, float)
        out[key] = r.value
    return out
