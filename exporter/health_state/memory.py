"""The health memory file: what one device source's judge remembers, by device uuid.

``<health.state_dir>/health-<source>.json``, written by the daemon
(:mod:`exporter.sources.health_keeper`) and read by it at start and by
``accel-exporter health clear``::

    {"format": 1, "kind": "accel-exporter health memory", "source": "nvml",
     "boot_id": "9f4c...",
     "devices": {"GPU-8e1c...": {
        "device": "0",                          # its device label when last seen
        "events": [["xid", "79", 1767000000.5]],  # kind, code, Unix time of the newest
        "ecc": [[["uncorrected", "volatile"], 3.0]],  # uncorrectable counters: labels, count
        "ecc_grew_at": 1767000000.0,            # when that count last grew
        "links_up": [["accel_nvlink_up", ["0"]]],  # links seen up: family, labels
        "lost": true,                           # down for a reason only a reset ends
        "reset_at": 0, "recovery_action": "none", "recovered_at": 0, "cleared_at": 0}}}

Entries at their default (0, "", false, empty) are left out. Times are Unix
seconds. Plain data and JSON, no I/O: the file itself is :mod:`exporter.state_file`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1
KIND = "accel-exporter health memory"
# Where a clear request for a daemon's file waits (see exporter.health_state.requests).
CLEAR_DIR = "health-clear"


def file_name(source: str) -> str:
    """The memory file's name for a device source."""
    return f"health-{source}.json"


@dataclass
class DeviceMemory:
    """What the judge remembers of one device (see the module docstring)."""

    device: str
    # (kind, code) -> Unix time of the newest such event: xid, afid or ras
    # (a counter that grew, exporter.health_rules.GROWTH_RULES).
    events: dict[tuple[str, str], float] = field(default_factory=dict)
    # The labels of an uncorrectable ECC counter after device and uuid -> its last count.
    ecc: dict[tuple[str, ...], float] = field(default_factory=dict)
    ecc_grew_at: float = 0.0
    # (family, labels after device and uuid) of the links seen up.
    links_up: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    lost: bool = False
    reset_at: float = 0.0
    # The last NVML recovery action read ("": none read yet), and when it went back to none.
    recovery_action: str = ""
    recovered_at: float = 0.0
    # When an operator last cleared the device (accel-exporter health clear).
    cleared_at: float = 0.0


@dataclass
class Memory:
    """One source's memory file: the boot it was written in and each device's memory."""

    source: str
    boot_id: str
    devices: dict[str, DeviceMemory] = field(default_factory=dict)


def _entry(mem: DeviceMemory) -> dict[str, Any]:
    out: dict[str, Any] = {"device": mem.device}
    if mem.events:
        out["events"] = sorted([kind, code, at] for (kind, code), at in mem.events.items())
    if mem.ecc:
        out["ecc"] = sorted([list(labels), count] for labels, count in mem.ecc.items())
    if mem.links_up:
        out["links_up"] = sorted([family, list(labels)] for family, labels in mem.links_up)
    for key in ("ecc_grew_at", "reset_at", "recovered_at", "cleared_at"):
        if getattr(mem, key):
            out[key] = getattr(mem, key)
    if mem.lost:
        out["lost"] = True
    if mem.recovery_action:
        out["recovery_action"] = mem.recovery_action
    return out


def encode(memory: Memory) -> str:
    """The file's text: deterministic, so an unchanged memory gives the same text."""
    doc = {
        "format": FORMAT,
        "kind": KIND,
        "source": memory.source,
        "boot_id": memory.boot_id,
        "devices": {uuid: _entry(mem) for uuid, mem in sorted(memory.devices.items())},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _time(value: Any, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} is not a time")
    return float(value)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    return value


def _labels(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list of labels")
    return tuple(_text(v, what) for v in value)


def _pairs(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, list) for v in value):
        raise ValueError(f"{key} is not a list of lists")
    return value


def _device(raw: Any) -> DeviceMemory:
    """One device's entry; ValueError naming what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    mem = DeviceMemory(_text(raw.get("device"), "device"))
    for item in _pairs(raw, "events"):
        if len(item) != 3 or item[0] not in ("xid", "afid", "ras"):
            raise ValueError("an event is not [xid|afid, code, time]")
        mem.events[(item[0], _text(item[1], "an event code"))] = _time(item[2], "an event")
    for item in _pairs(raw, "ecc"):
        if len(item) != 2:
            raise ValueError("an ECC entry is not [labels, count]")
        mem.ecc[_labels(item[0], "ECC labels")] = _time(item[1], "an ECC count")
    for item in _pairs(raw, "links_up"):
        if len(item) != 2:
            raise ValueError("a link is not [family, labels]")
        mem.links_up.add((_text(item[0], "a link family"), _labels(item[1], "link labels")))
    for key in ("ecc_grew_at", "reset_at", "recovered_at", "cleared_at"):
        setattr(mem, key, _time(raw.get(key, 0.0), key))
    lost = raw.get("lost", False)
    if not isinstance(lost, bool):
        raise ValueError("lost is not true or false")
    mem.lost = lost
    mem.recovery_action = _text(raw.get("recovery_action", ""), "recovery_action")
    return mem


def decode(raw: Mapping[str, Any]) -> tuple[Memory, list[str]]:
    """The memory in a file's JSON object, and the devices left out (``uuid: why``).

    ValueError when the document is not a health memory file of this format (then
    nothing in it is used); a bad device entry loses only that device.
    """
    if raw.get("format") != FORMAT or raw.get("kind") != KIND:
        raise ValueError(f"not a health memory file of format {FORMAT}")
    devices = raw.get("devices")
    source, boot = raw.get("source"), raw.get("boot_id")
    if not isinstance(devices, dict) or not isinstance(source, str) or not isinstance(boot, str):
        raise ValueError("a health memory file needs source, boot_id and devices")
    memory = Memory(source, boot)
    problems = []
    for uuid, item in devices.items():
        try:
            memory.devices[str(uuid)] = _device(item)
        except ValueError as exc:
            problems.append(f"{uuid}: {exc}")
    return memory, problems
