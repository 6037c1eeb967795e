"""What every device backend shares: status codes as data, one add path, one device loop.

A device backend (nvml, amdsmi, levelzero, hlml, tpu) enumerates its devices at
``bootstrap`` (the protocol: :mod:`exporter.backends.base`) and answers each
``poll`` through :func:`poll_devices`, giving it one ``read`` step per device
(tpu's step only sorts the runtime's answers by chip: its faults are per address).
The pieces a backend declares rather than writes:

- :class:`Codes`, the vendor's table of status codes: which say "this field does
  not exist here" (omitted silently), which say the device is gone (with the
  down reason it is exported with), and the name of each (the ``reason`` of a
  failed field). Everything else is a failed field: omitted, counted and logged
  once.
- The sentinel set its library uses for "not available", given to
  :class:`Emitter`, which drops those, ``None`` and non-finite values on add,
  once for every path that goes through it.

The "not available" encodings and plausibility bounds are said here once for
every backend, including the hot paths that append to rows directly: all ones
at each C width (:data:`U16_MAX`, :data:`U32_MAX`, :data:`U64_MAX`; with -1,
:data:`NOT_AVAILABLE`), :func:`not_available`, :func:`number` for a value of
unknown type, :func:`within` and the ceilings :data:`MAX_CELSIUS`, :data:`MAX_MHZ` and
:data:`MAX_WATTS`.

A ``read`` step raises :class:`DeviceGone` when the device is gone or answered
nothing; the loop then keeps none of that device's rows, says so in the reply's
device list and logs the change once. A device that stays up gets its failed
fields counted in one family, ``accel_field_errors_total{source, reason}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows, drop, new_rows
from exporter.backends.base import BackendError
from exporter.family_names import ACCEL_FIELD_ERRORS_TOTAL

K = TypeVar("K", bound=Hashable)

# Failed fields of a device that is up, by backend and reason, since the worker started.
FIELD_ERRORS = ACCEL_FIELD_ERRORS_TOTAL

# All ones at each C width: the "not available" of the vendor libraries' unsigned fields.
U16_MAX = 0xFFFF
U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
# "Not available" as NVML and HLML answer it: all ones at 32 or 64 bits, and -1 where the
# binding reads the field signed (the Emitter's sentinel set of both).
NOT_AVAILABLE: frozenset[float] = frozenset({U32_MAX, U64_MAX, -1})
# Readings above these are garbage, not measurements, on any accelerator.
MAX_CELSIUS = 250
MAX_MHZ = 100_000
# No accelerator card draws this much; a faster energy increase is a counter fault.
MAX_WATTS = 5000.0
# An exact scale is an int, so integral values stay ints (cheaper for JSON both ways).
MHZ = 1_000_000


def not_available(value: float, sentinels: frozenset[float] = NOT_AVAILABLE) -> bool:
    """True for one of ``sentinels`` (NVML's and HLML's by default) and for inf and nan."""
    return value in sentinels or value - value != 0  # inf - inf and nan - nan are nan


def within(value: float, low: float, high: float) -> bool:
    """Whether ``value`` is a plausible reading: finite and in ``low..high``.

    False for a -1 "unknown" below ``low``, NaN, and garbage above ``high``.
    """
    return math.isfinite(value) and low <= value <= high


def number(value: Any, *sentinels: int) -> float | None:
    """``value`` as a number, or None when it is "N/A", not a number, a sentinel or not finite.

    For libraries that answer dicts of mixed values (amdsmi's "N/A" strings). An int
    stays an int (a measurement the device gives in whole units).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value in sentinels:
        return None
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else None  # beyond any device counter
    return value if math.isfinite(value) else None


class DeviceGone(Exception):
    """The device stopped answering (lost, reset required, driver gone) or answered nothing.

    ``reason`` is the snake_case down reason exported for the device.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail or reason


@dataclass(frozen=True)
class Codes(Generic[K]):
    """One vendor's status codes: a table, not code (see the module docstring).

    ``names`` maps a code to its reason text; a code not in it is
    ``unknown.format(code)``. ``gone`` maps each code that takes the whole device
    down to the down reason exported for it.
    """

    names: Mapping[K, str]
    absent: frozenset[K]
    gone: Mapping[K, str]
    unknown: str = "{}"

    def reason(self, code: K) -> str:
        """The exported reason of ``code``."""
        name = self.names.get(code)
        return name if name is not None else self.unknown.format(code)

    def down(self, code: K) -> str:
        """The down reason of a device whose identification failed with ``code``."""
        return self.gone.get(code) or self.reason(code)

    def failed(self, code: K, call: str, detail: str = "") -> str:
        """Classify a code a call returned: "" when absent, else the failed field's reason.

        DeviceGone when the code says the device is gone.
        """
        if code in self.absent:
            return ""
        down = self.gone.get(code)
        if down is not None:
            raise DeviceGone(down, f"{call}: {detail or self.reason(code)}")
        return self.reason(code)


class Emitter:
    """Adds one device's readings to a reply's rows (``wire.new_rows()``).

    Values that are ``None``, one of the backend's ``sentinels`` or not finite
    are dropped here, so no code path that adds through it can export "not
    available" as a number. Row prefixes (the device's position and a
    dimension's label values) are shared through ``cache``, kept by the caller
    across polls.
    """

    __slots__ = ("_base", "_cache", "position", "rows", "sentinels")

    def __init__(
        self,
        position: int,
        rows: Rows,
        sentinels: frozenset[float] = frozenset(),
        cache: dict[tuple[str, ...], tuple[Any, ...]] | None = None,
    ) -> None:
        self.position = position
        self.rows = rows
        self.sentinels = sentinels
        self._cache = cache if cache is not None else {}
        self._base = self.prefix()

    def prefix(self, *extra: str) -> tuple[Any, ...]:
        """The row prefix of this device with these label values: ``(position, *extra)``."""
        prefix = self._cache.get(extra)
        if prefix is None:
            prefix = self._cache[extra] = (self.position, *extra)
        return prefix

    def add(self, metric: str, value: float | None, *extra: str) -> None:
        """Add one reading; silently skipped when ``value`` is absent, a sentinel or not finite.

        ``extra`` are the family's label values after ``device`` and ``uuid``.
        """
        if value is None or value in self.sentinels:
            return
        if value - value:  # inf or nan
            return
        # put(self.rows, metric, self.prefix(*extra), value), inlined: ~10 a device a poll
        prefix = self._cache.get(extra) if extra else self._base
        if prefix is None:
            prefix = self.prefix(*extra)
        rows = self.rows[metric]  # the reply's rows (new_rows()): created on first use
        rows += prefix
        rows.append(value)

    def usable(self, value: float | None) -> bool:
        """Whether ``value`` is a reading (not None, not a sentinel, finite).

        For a raw value that feeds state (an energy total, a bit mask) before
        anything is added.
        """
        return value is not None and value not in self.sentinels and not value - value

    def scaled(self, metric: str, raw: float | None, mul: int, per: int, *extra: str) -> None:
        """Add ``raw`` in base units (``raw * mul`` or ``raw / per``), checked before scaling.

        A sentinel is a raw value: once scaled it no longer looks like one. One of
        ``mul`` and ``per`` is 1: a division is exact where multiplying by 1e-3 is not.
        """
        if self.usable(raw):
            self.add(metric, raw * mul if per == 1 else raw / per, *extra)  # type: ignore[operator]

    def ratio(self, metric: str, percent: float | None, *extra: str) -> None:
        """Add a percent as a 0..1 ratio (sentinels and out-of-range values are dropped)."""
        if percent is not None and 0 <= percent <= 100:  # all-ones and nan fail this too
            self.add(metric, percent / 100, *extra)


def expect_poll(op: str, source: str) -> None:
    """A device backend answers ``poll`` only: BackendError ``unknown_op`` for anything else."""
    if op != "poll":
        raise BackendError("unknown_op", f"the {source} backend has no operation {op!r}")


def not_identified(reason: str, again: Callable[[], None] | None = None) -> None:
    """DeviceGone for a device the worker could not identify when it started (``reason``).

    It is listed under a placeholder uuid with no components, so it is only ever
    reported down; ``again`` (on a slow poll) asks it once more and raises
    InventoryChanged when it answers now, so a new worker enumerates it properly.
    """
    if again is not None:
        again()
    raise DeviceGone(reason, "not identified when the worker started")


class Polled(Protocol):
    """What the device loop needs of a device."""

    @property
    def index(self) -> int:
        """The library's index (the one crumbs and isolation use)."""
        ...

    @property
    def device(self) -> str:
        """The ``device`` label."""
        ...

    @property
    def uuid(self) -> str:
        """The ``uuid`` label."""
        ...

    down: str  # the reason it was down at the previous poll ("" when up)
    errors: dict[str, int]  # failed fields by reason, since the worker started


class Failing:
    """The fields failing on each device, logged when they start failing and when they recover.

    A field's line is written again only when its reason changes, never every poll.
    """

    def __init__(self, logger: Any) -> None:
        self._log = logger
        self._why: dict[tuple[str, str], str] = {}

    def note(self, dev: Polled, field: str, why: str) -> None:
        """``field`` of ``dev`` failed with ``why`` (the device itself: field "device")."""
        key = (dev.uuid, field)
        if self._why.get(key) != why:
            self._why[key] = why
            self._log.warning("field read failed", device=dev.device, field=field, reason=why)

    def recovered(self, dev: Polled, failing: Collection[str]) -> None:
        """Every field of ``dev`` noted before and not in ``failing`` now answers again."""
        for key in [k for k in self._why if k[0] == dev.uuid and k[1] not in failing]:
            self._log.info("field read recovered", device=dev.device, field=key[1])
            del self._why[key]


def count(errors: dict[str, int], reason: str, n: int = 1) -> None:
    """Count ``n`` failed fields of one device with ``reason``."""
    errors[reason] = errors.get(reason, 0) + n


D = TypeVar("D", bound=Polled)
# read(device, position, fast rows, slow rows or None): DeviceGone when it is down.
Read = Callable[[D, int, Rows, "Rows | None"], None]


def poll_devices(
    devices: Sequence[D], slow: bool, read: Read[D], logger: Any, source: str
) -> dict[str, Any]:
    """The poll reply of ``devices`` (see exporter.sources.device for its shape).

    Before touching a device the worker says which one it is
    (:mod:`exporter.backend_api.crumb`); a device found down has none of its rows
    in the reply, not half of them; a change of state is logged once; a device
    that is up gets its failed-field counts as ``accel_field_errors_total``.
    """
    states = []
    readings, slow_readings = new_rows(), new_rows()
    for position, dev in enumerate(devices):
        crumb.device(dev.index)
        reason = detail = ""
        try:
            read(dev, position, readings, slow_readings if slow else None)
        except DeviceGone as exc:
            reason, detail = exc.reason, exc.detail
        states.append({"uuid": dev.uuid, "up": not reason, "reason": reason})
        if reason != dev.down:
            if reason:
                logger.warning("device down", device=dev.device, reason=reason, detail=detail)
            else:
                logger.info("device up", device=dev.device)
            dev.down = reason
        if reason:
            drop(readings, position)
            drop(slow_readings, position)
        elif dev.errors:
            target = readings[FIELD_ERRORS]
            for why, n in sorted(dev.errors.items()):
                target += (position, source, why, n)
    crumb.clear()
    reply: dict[str, Any] = {"devices": states, "readings": readings}
    if slow:
        reply["slow_readings"] = slow_readings
    return reply
