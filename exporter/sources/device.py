"""A vendor device backend seen from the daemon: a worker process behind a source.

The worker (``exporter.backends.<vendor>``) answers ``poll`` with per-device
status and readings. This class checks the answer against the inventory the
worker announced at bootstrap, adds the identity families (info, up, count),
and keeps slow fields (read every ``slow_interval``) between slow polls. When
the worker fails, every known device is exported ``up 0`` with the reason and
its identity stays visible, so alerts can still say which GPU is gone. With
``expected_devices`` set, ``accel_devices_expected`` is exported in every state,
and a library that cannot load is a failure rather than "no such hardware here".

Wire shapes (all JSON):

inventory  ``{"vendor": str, "devices": [{"device": str, "uuid": str, "info": {label: str}}]}``
poll args  ``{"slow": bool, "processes": bool, "events": bool}``
poll fault ``inventory_changed`` (the devices differ from the inventory): the
           worker is restarted at once and asked again
poll reply ``{"devices": [{"uuid": str, "up": bool, "reason": str}],
              "readings": {metric: [position, label, ..., number, ...]},
              "slow_readings": {...} (only when slow was asked)}``

Readings are grouped per family, and the identity labels are not repeated:
each family's list holds its series one after another, each as the device's
position in the inventory (an int, standing for its ``device`` and ``uuid``
labels), then its other label values in catalog order, then the value. A row
is as wide as the family has labels, so ``accel_power_watts`` (device, uuid)
rows are ``[0, 312.5, 1, 298.0]`` and ``accel_clock_hertz`` (device, uuid,
clock) rows ``[0, "graphics", 1.98e9, 0, "sm", 1.98e9]``. Only device families
(labels starting with device, uuid) may appear; anything that does not fit
(an unknown family, a ragged list, a position outside the inventory, a label
that is not a string, a value that is not a finite number) is a ShapeError,
never a truncation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.backends.base import INVENTORY_CHANGED
from exporter.backends.wire import ROW_WIDTH
from exporter.catalog.device import INFO_LABELS
from exporter.config.schema import DeviceSourceConfig
from exporter.errors import SourceError, SourceUnavailable, WorkerError
from exporter.health import HealthJudge
from exporter.model import Reading, readings_of
from exporter.sources.worker import WorkerSource

# Share of the poll deadline given to the worker call, so the runner's own
# deadline (which kills the worker with reason "timeout") fires first.
CALL_SHARE = 0.85


@dataclass(frozen=True)
class DeviceId:
    """Identity of one device as announced in the inventory."""

    device: str
    uuid: str
    info: tuple[tuple[str, str], ...]


class ShapeError(Exception):
    """A worker reply does not have the agreed shape."""


def parse_inventory(raw: Mapping[str, Any]) -> tuple[str, list[DeviceId]]:
    """Validate an inventory; ShapeError naming the first problem."""
    vendor = raw.get("vendor")
    devices = raw.get("devices")
    if not isinstance(vendor, str) or not isinstance(devices, list):
        raise ShapeError("inventory needs a vendor string and a devices list")
    out = []
    seen: set[str] = set()
    for i, item in enumerate(devices):
        if not isinstance(item, dict):
            raise ShapeError(f"inventory device {i} is not an object")
        device, uuid, info = item.get("device"), item.get("uuid"), item.get("info", {})
        if not isinstance(device, str) or not isinstance(uuid, str) or not isinstance(info, dict):
            raise ShapeError(f"inventory device {i} needs string device and uuid")
        if uuid in seen:
            raise ShapeError(f"inventory lists uuid {uuid} twice")
        seen.add(uuid)
        unknown = set(info) - set(INFO_LABELS)
        if unknown:
            raise ShapeError(f"inventory device {i} has unknown info labels {sorted(unknown)}")
        out.append(DeviceId(device, uuid, tuple((k, str(v)) for k, v in sorted(info.items()))))
    return vendor, out


_INT, _FLOAT, _STR = frozenset({int}), frozenset({float}), frozenset({str})
_NUMBER = _INT | _FLOAT


def parse_readings(raw: Any, devices: Sequence[DeviceId], where: str) -> list[Reading]:
    """``{metric: [position, label..., number, ...]}`` -> readings (see the module docstring).

    ShapeError on anything malformed: an unknown or non-device family, rows not
    a whole number of rows wide, a position outside the inventory, a label that
    is not a string, a value that is not a finite number. Each family's rows
    are checked column by column, so a reply of hundreds of series costs a few
    passes in C rather than a Python loop over each item.
    """
    if not isinstance(raw, dict):
        raise ShapeError(f"{where} is not an object")
    identity_of = [(d.device, d.uuid) for d in devices]
    device_of = [d.device for d in devices]
    uuid_of = [d.uuid for d in devices]
    known = frozenset(range(len(devices)))
    out: list[Reading] = []
    for metric, rows in raw.items():
        width = ROW_WIDTH.get(metric)
        if width is None:
            raise ShapeError(f"{where}: {metric!r} is not a device family")
        if type(rows) is not list or len(rows) % width:
            raise ShapeError(f"{where}.{metric} is not a list of rows of {width}")
        positions = rows[0::width]
        # Types first: a list or dict there is unhashable for the set check, and the
        # type check also refuses True and 1.0, which the set check would take for 1.
        if not set(map(type, positions)) <= _INT or not set(positions) <= known:
            raise ShapeError(f"{where}.{metric} names a device outside the inventory")
        extras = []
        for k in range(1, width - 1):
            column = rows[k::width]
            if not set(map(type, column)) <= _STR:
                raise ShapeError(f"{where}.{metric} has a label that is not a string")
            extras.append(column)
        values = rows[width - 1 :: width]
        kinds = set(map(type, values))
        try:
            if kinds == _FLOAT:
                finite = all(map(math.isfinite, values))
            elif kinds <= _NUMBER:
                values = list(map(float, values))  # an int is finite unless it overflows here
                finite = kinds == _INT or all(map(math.isfinite, values))
            else:
                raise ShapeError(f"{where}.{metric} has a value that is not a number")
        except OverflowError:  # an integer beyond any double
            finite = False
        if not finite:
            raise ShapeError(f"{where}.{metric} has a value that is not finite")
        if extras:
            labels: Iterable[tuple[str, ...]] = zip(
                map(device_of.__getitem__, positions),
                map(uuid_of.__getitem__, positions),
                *extras,
                strict=True,  # equal by construction: the list is a whole number of rows
            )
        else:  # identity labels only: one shared tuple per device
            labels = map(identity_of.__getitem__, positions)
        out += readings_of(metric, labels, values)
    return out


class DeviceSource(WorkerSource):
    """Polls a device backend running in a worker process."""

    def __init__(
        self,
        name: str,
        config: DeviceSourceConfig,
        backend: str,
        *,
        backend_config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        vendor: str = "",
    ) -> None:
        super().__init__(
            name,
            config,
            backend,
            backend_config or {},
            bootstrap_timeout=config.bootstrap_timeout,
            env=env,
        )
        self.device_config = config
        # The vendor label before the worker's inventory names it (the library may never load).
        self._default_vendor = vendor
        self._vendor = ""
        self._devices: list[DeviceId] = []
        self._inventory_raw: dict[str, Any] | None = None
        self._slow: list[Reading] = []
        self._next_slow = 0.0
        # The health verdict of each device, derived from every poll's readings.
        self._health = HealthJudge()

    def status(self) -> dict[str, Any]:
        """Worker state plus the devices known."""
        return {**super().status(), "vendor": self._vendor, "devices": len(self._devices)}

    def _expected(self) -> list[Reading]:
        """``accel_devices_expected`` when configured, whatever state the worker is in."""
        expected = self.device_config.expected_devices
        vendor = self._vendor or self._default_vendor
        if expected is None or not vendor:
            return []
        return [Reading("accel_devices_expected", (vendor,), float(expected))]

    def _identity(self) -> list[Reading]:
        out = [Reading("accel_devices", (self._vendor,), float(len(self._devices)))]
        out.extend(self._expected())
        for dev in self._devices:
            info = dict(dev.info)
            info.update(vendor=self._vendor, device=dev.device, uuid=dev.uuid)
            out.append(
                Reading("accel_device_info", tuple(info.get(k, "") for k in INFO_LABELS), 1.0)
            )
        return out

    def _all_down(self, reason: str) -> list[Reading]:
        out = self._identity() if self._devices else self._expected()
        for dev in self._devices:
            out.append(Reading("accel_device_up", (dev.device, dev.uuid), 0.0))
            out.append(
                Reading("accel_device_down_reason_info", (dev.device, dev.uuid, reason), 1.0)
            )
        return self._health.judge(out)

    async def poll(self) -> Sequence[Reading]:
        """One poll; a worker whose devices changed is replaced and asked again."""
        deadline = time.monotonic() + self.timeout * CALL_SHARE
        try:
            return await self._poll_once(deadline)
        except WorkerError as exc:
            if exc.reason != INVENTORY_CHANGED:
                raise
            # Only a new bootstrap describes the changed devices (a GPU identified
            # at last, a MIG mode switched): restart now, ask within the deadline.
            await self.runner.restart(exc.reason, exc.detail)
        return await self._poll_once(deadline)

    async def _poll_once(self, deadline: float) -> Sequence[Reading]:
        """Wait for the worker if it is starting, ask it, check the answer."""
        try:
            inventory = await self.runner.ready(timeout=max(0.0, deadline - time.monotonic()))
            if inventory is not self._inventory_raw:
                self._vendor, self._devices = parse_inventory(inventory)
                self._inventory_raw = inventory
                self._slow = []
                self._next_slow = 0.0
            slow = time.monotonic() >= self._next_slow
            reply = await self.runner.call(
                "poll",
                {
                    "slow": slow,
                    "processes": self.device_config.processes,
                    "events": self.device_config.events,
                },
                timeout=max(0.05, deadline - time.monotonic()),
            )
            readings = self._check_reply(reply, slow)
        except ShapeError as exc:
            await self.runner.invalidate("protocol_error", str(exc))
            raise SourceError(
                "protocol_error", str(exc), self._all_down("protocol_error")
            ) from None
        except SourceUnavailable as exc:
            if self.device_config.expected_devices is not None:
                # The node is declared to have accelerators: a missing library or driver
                # is a fault to alert on, not a machine without this vendor's hardware.
                raise SourceError(exc.reason, exc.detail, self._all_down(exc.reason)) from None
            # Devices seen before stay visible, down with the reason (an unavailable
            # library after a success is a failure: the scheduler decides).
            raise SourceUnavailable(exc.reason, exc.detail, self._all_down(exc.reason)) from None
        except WorkerError as exc:
            raise type(exc)(exc.reason, exc.detail, self._all_down(exc.reason)) from None
        if slow:
            self._next_slow = time.monotonic() + self.device_config.slow_interval
        return readings

    def _check_reply(self, reply: Any, slow: bool) -> list[Reading]:
        if not isinstance(reply, dict):
            raise ShapeError("poll reply is not an object")
        devices = reply.get("devices")
        if not isinstance(devices, list):
            raise ShapeError("poll reply has no devices list")
        if len(devices) != len(self._devices):
            raise ShapeError(
                f"asked about {len(self._devices)} devices, the worker answered for {len(devices)}"
            )
        known = {dev.uuid: dev for dev in self._devices}
        out = self._identity()
        seen: set[str] = set()
        down: set[tuple[str, ...]] = set()
        for i, item in enumerate(devices):
            if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
                raise ShapeError(f"devices[{i}] needs a uuid")
            dev = known.get(item["uuid"])
            if dev is None or dev.uuid in seen:
                raise ShapeError(f"devices[{i}] uuid {item['uuid']!r} is not in the inventory")
            seen.add(dev.uuid)
            up = item.get("up") is True
            out.append(Reading("accel_device_up", (dev.device, dev.uuid), 1.0 if up else 0.0))
            if not up:
                reason = str(item.get("reason") or "error")
                out.append(
                    Reading("accel_device_down_reason_info", (dev.device, dev.uuid, reason), 1.0)
                )
            if not up:
                down.add((dev.device, dev.uuid))
        out.extend(parse_readings(reply.get("readings", {}), self._devices, "readings"))
        if slow:
            self._slow = parse_readings(
                reply.get("slow_readings", {}), self._devices, "slow_readings"
            )
        # Slow fields read before a device went down must not outlive it.
        out.extend(r for r in self._slow if r.labels[:2] not in down)
        return self._health.judge(out)
