"""Intel Gaudi through libhlml (the ``habana-pyhlml`` package), run inside a worker process.

``bootstrap()`` points pyhlml at ``library_path`` (its default is
``/usr/lib/habanalabs/libhlml.so``, taken as a default argument of the
library class, which is where the configured path goes), initialises HLML,
enumerates the devices and reads their identity. ``handle("poll", {"slow": ...})``
reads every device. The 2023 ``pyhlml`` 1.9 package is refused: it shares one
handle object between all devices and lets a current libhlml write an 84-byte
PCI struct into a 52-byte buffer.

Units: power mW, energy mJ since the driver loaded, temperatures °C, clocks
MHz, memory bytes, violation time ns (as NVML's struct, which HLML's mirrors).
NOT_SUPPORTED leaves a family absent; AIP_IS_LOST takes the device down with
reason ``gpu_lost``; an all-ones value (the usual "not available") is absent.
PCIe throughput is not exported: HLML documents no unit for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.metadata
import importlib.util
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows, put
from exporter.backends.base import (
    BackendError,
    BackendUnavailable,
    InventoryChanged,
    unique_uuids,
)
from exporter.backends.contract import (
    MAX_CELSIUS,
    MAX_MHZ,
    MHZ,
    NOT_AVAILABLE,
    U32_MAX,
    U64_MAX,
    Codes,
    Emitter,
    Failing,
    count,
    expect_poll,
    not_identified,
    poll_devices,
)
from exporter.backends.counters import Energy
from exporter.family_names import (
    ACCEL_CLOCK_HERTZ,
    ACCEL_CLOCK_MAX_HERTZ,
    ACCEL_CLOCK_THROTTLE_ACTIVE,
    ACCEL_CLOCK_VIOLATION_SECONDS_TOTAL,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_GAUDI_MEMORY_UTILIZATION_RATIO,
    ACCEL_GAUDI_NIC_PORT_UP,
    ACCEL_GAUDI_NIC_STATISTIC_TOTAL,
    ACCEL_GAUDI_REPLACED_ROWS,
    ACCEL_GAUDI_ROW_REPLACEMENT_PENDING,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_PCIE_LINK_GENERATION,
    ACCEL_PCIE_LINK_WIDTH,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_POWER_LIMIT_WATTS,
    ACCEL_POWER_WATTS,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
)
from exporter.host import libsearch

SOURCE = "hlml"
# hlml_return_t
UNINITIALIZED = 1
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
AIP_IS_LOST = 15
RETURN_NAMES = {
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    5: "already_initialized",
    6: "not_found",
    7: "insufficient_size",
    9: "driver_not_loaded",
    10: "timeout",
    15: "aip_is_lost",
    20: "memory",
    21: "no_data",
    49: "unknown",
}
# The backend contract's table (exporter.backends.contract).
CODES: Codes[int] = Codes(
    names=RETURN_NAMES,
    absent=frozenset({NOT_SUPPORTED}),
    gone={AIP_IS_LOST: "gpu_lost"},
    unknown="hlml_return_{}",
)
MIN_BINDING = (1, 24)
# HLML's "not available": all ones at 32 or 64 bits, -1 where pyhlml reads them signed.
U32_NA, U64_NA, SENTINELS = U32_MAX, U64_MAX, NOT_AVAILABLE
NANO = 1_000_000_000
# hlml_temperature_sensors_t -> sensor label (the chip's own is "gpu", as on other vendors).
SENSORS = (
    (0, "gpu"),
    (1, "board"),
    (2, "other"),
    (3, "hbm"),
    (4, "voltage_regulator"),
    (5, "ctemp"),
)
THROTTLE_REASONS = ((1, "power"), (2, "thermal"))
VIOLATIONS = ((0, "power"), (1, "thermal"))
ECC_TYPES = ((0, "corrected"), (1, "uncorrected"))
ECC_COUNTERS = ((0, "volatile"), (1, "aggregate"))
ROW_CAUSES = ((0, "multiple_single_bit_ecc"), (1, "double_bit_ecc"))
_COUNTER_NAME = re.compile(r"[^a-z0-9_]+")


def return_name(code: int) -> str:
    """An hlml_return_t as a short reason."""
    return CODES.reason(code)


def printable(raw: Any) -> str:
    """An HLML string (bytes) decoded, without control characters, stripped."""
    value = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return "".join(ch for ch in value if ch.isprintable()).strip()


def _binding_version() -> tuple[int, int] | None:
    """The habana-pyhlml release installed (None: only some other distribution)."""
    for dist in ("habana-pyhlml", "pyhlml"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            parts = importlib.metadata.version(dist).split(".")
            with contextlib.suppress(ValueError, IndexError):
                return int(parts[0]), int(parts[1])
    return None


def load(found: libsearch.Found) -> Any:
    """``pyhlml.main``, bound to the library ``found``; BackendUnavailable with the reason."""
    if importlib.util.find_spec("pyhlml") is None:
        raise BackendUnavailable(
            "binding_missing",
            "the habana-pyhlml package is not installed "
            "(accel-exporter's 'intel' extra, docs/deploy.md)",
        )
    version = _binding_version()
    if version is not None and version < MIN_BINDING:
        raise BackendUnavailable(
            "binding_mismatch",
            f"pyhlml {version[0]}.{version[1]} is installed; it aliases device handles and"
            " overflows the PCI struct of current drivers: install habana-pyhlml matching"
            " the driver (1.24 or later)",
        )
    if not found.path:
        raise BackendUnavailable("library_not_found", found.detail)
    library_path = found.path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pyhlml.hlml_types, its own import
        main = importlib.import_module("pyhlml.main")
        lib_module = importlib.import_module("pyhlml.hlml_lib")
    # pyhlml builds a fresh library object on every hlmlInit with the path as the
    # constructor's default argument: that default is where the configured path goes.
    lib_module.LibHLML.__init__.__defaults__ = (library_path,)
    return main


@dataclass
class Aip:
    """One enumerated Gaudi device."""

    index: int
    handle: Any
    device: str
    uuid: str
    info: dict[str, str]
    energy: Energy = field(default_factory=lambda: Energy(1000))
    # (port, label) of the NIC ports the MAC info mask lists.
    ports: list[tuple[int, str]] = field(default_factory=list)
    # The sensors not found unsupported since the last slow poll.
    sensors: list[tuple[int, str]] = field(default_factory=list)
    unidentified: str = ""
    down: str = ""
    # Row prefixes shared by this device's readings across polls (see Emitter).
    prefixes: dict[tuple[str, ...], tuple[Any, ...]] = field(default_factory=dict)
    # Calls that failed (not merely unsupported) since the worker started, by reason.
    errors: dict[str, int] = field(default_factory=dict)


class HlmlBackend:
    """The ``hlml`` device backend (see the module docstring)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.api: Any = None
        self.aips: list[Aip] = []
        self._log = log.get(source=SOURCE)
        self._failing = Failing(self._log)
        self._names: dict[bytes, tuple[tuple[int, str], ...]] = {}

    # -- bootstrap -------------------------------------------------------------

    def bootstrap(self) -> dict[str, Any]:
        """Load libhlml, initialise it, describe every device."""
        found = libsearch.find(libsearch.HLML, str(self.config.get("library_path") or ""))
        api = self.api = load(found)
        path = found.path
        try:
            api.hlmlInit()
        except api.HLMLError as exc:
            code = int(exc.value)
            if code == UNINITIALIZED:  # what pyhlml raises when the library does not load
                raise BackendUnavailable(
                    "library_not_found", f"pyhlml could not load {path}"
                ) from None
            if code == DRIVER_NOT_LOADED:
                raise BackendUnavailable(
                    "driver_not_loaded",
                    "hlml_init: the habanalabs driver is not loaded (or /dev/hl* is not passed"
                    " to the container)",
                ) from None
            raise BackendError(
                return_name(code), f"hlml_init failed: {return_name(code)}"
            ) from None
        driver = self._text(api.hlmlGetDriverVersion)
        try:
            count = int(api.hlmlDeviceGetCount())
        except api.HLMLError as exc:
            raise BackendError(
                return_name(int(exc.value)), f"hlml_device_get_count: {return_name(int(exc.value))}"
            ) from None
        for index in crumb.wanted(self.config, count):
            crumb.device(index)
            aip = self._describe(index)
            aip.info["driver_version"] = driver
            self.aips.append(aip)
        crumb.clear()
        if not self.aips:
            raise BackendUnavailable("no_devices", "HLML found no Gaudi device")
        uuids = unique_uuids([(a.device, a.uuid) for a in self.aips], "gaudi-")
        for aip, uuid in zip(self.aips, uuids, strict=True):
            aip.uuid = uuid
        self._log.info("hlml ready", devices=len(self.aips), driver=driver)
        return {
            "vendor": "intel_gaudi",
            "devices": [
                {"device": a.device, "uuid": a.uuid, "info": a.info, "index": a.index}
                for a in self.aips
            ],
        }

    def _text(self, fn: Callable[..., Any], *args: Any) -> str:
        """A string answer, decoded and printable; empty when the call fails."""
        try:
            return printable(fn(*args))
        except self.api.HLMLError:
            return ""

    def _describe(self, index: int) -> Aip:
        api = self.api
        try:
            # A copy: pyhlml 1.9 returned one shared handle object for every device.
            handle = ctypes.c_void_p(api.hlmlDeviceGetHandleByIndex(index).value)
            uuid = printable(api.hlmlDeviceGetUUID(handle))
            crumb.identity(f"uuid={uuid}")
            pci = api.hlmlDeviceGetPCIInfo(handle)
        except api.HLMLError as exc:
            reason = CODES.down(int(exc.value))
            self._log.warning("device unidentified", device=index, reason=reason)
            return Aip(index, None, str(index), "", {}, unidentified=reason)
        bdf = "".join(ch for ch in pci.bus_id.decode("ascii", "replace") if ch.isprintable())
        crumb.identity(f"uuid={uuid};pci_bus_id={bdf.strip()}")
        info = {
            "model": self._text(api.hlmlDeviceGetName, handle),
            "pci_bus_id": bdf.strip(),
            "serial": self._text(api.hlmlDeviceGetSerial, handle),
        }
        aip = Aip(index, handle, str(index), uuid or (f"pci-{bdf}" if bdf else ""), info)
        aip.ports = self._ports(aip)
        aip.sensors = list(SENSORS)
        return aip

    def _ports(self, aip: Aip) -> list[tuple[int, str]]:
        """The NIC ports the MAC info mask lists, with their labels."""
        try:
            mask, _external = self.api.hlmlDeviceGetMacAddrInfo(aip.handle)
        except self.api.HLMLError:
            return []
        ports = [w * 64 + b for w in range(2) for b in range(64) if (int(mask[w]) >> b) & 1]
        return [(port, str(port)) for port in ports]

    # -- requests --------------------------------------------------------------

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``; anything else is an error."""
        expect_poll(op, SOURCE)
        return poll_devices(self.aips, bool(args.get("slow")), self._poll_aip, self._log, SOURCE)

    def _poll_aip(self, aip: Aip, position: int, rows: Rows, slow: Rows | None) -> None:
        """Read one device into the reply's rows; DeviceGone when it is down."""
        if aip.unidentified:
            not_identified(
                aip.unidentified, None if slow is None else lambda: self._identify_again(aip)
            )
        if slow is not None:
            aip.sensors = list(SENSORS)  # ask the unsupported ones again
        self._fast(aip, position, rows)
        if slow is not None:
            self._slow(aip, Emitter(position, slow, SENTINELS, aip.prefixes))

    def _identify_again(self, aip: Aip) -> None:
        """InventoryChanged when a device unidentified at bootstrap answers now."""
        api = self.api
        try:
            handle = api.hlmlDeviceGetHandleByIndex(aip.index)
            uuid = api.hlmlDeviceGetUUID(handle)
        except api.HLMLError:
            return  # still lost: asked again at the next slow poll
        raise InventoryChanged(f"Gaudi {aip.device} answers again, as {uuid!r}")

    def _call(self, aip: Aip, name: str, *args: Any) -> Any:
        """``pyhlml.<name>(handle, *args)``; None when not supported or failed."""
        try:
            return getattr(self.api, name)(aip.handle, *args)
        except self.api.HLMLError as exc:
            self._failed(aip, name, exc)
            return None

    def _failed(self, aip: Aip, name: str, exc: Any) -> None:
        """DeviceGone for a lost device; another failure is counted and logged once."""
        reason = CODES.failed(int(exc.value), name)
        if reason:
            count(aip.errors, reason)
            self._failing.note(aip, name, reason)

    def _fast(self, aip: Aip, pos: int, rows: Rows) -> None:
        # The one fast path that appends by hand (bench/poll.py: through the Emitter it
        # cost 10-30 % more CPU a poll): each raw value is tested against its width's
        # all-ones here, before scaling; the slow path adds through the Emitter.
        me = (pos,)
        call = self._call
        util = call(aip, "hlmlDeviceGetUtilizationRates")
        if util is not None:
            if util.aip <= 100:
                rows[ACCEL_UTILIZATION_RATIO] += (pos, util.aip / 100)
            if util.memory <= 100:
                rows[ACCEL_GAUDI_MEMORY_UTILIZATION_RATIO] += (pos, util.memory / 100)
        mem = call(aip, "hlmlDeviceGetMemoryInfo")
        if mem is not None and 0 < mem.total != U64_NA and mem.used <= mem.total:
            rows[ACCEL_MEMORY_TOTAL_BYTES] += (pos, mem.total)
            rows[ACCEL_MEMORY_USED_BYTES] += (pos, mem.used)
            if mem.free <= mem.total:
                rows[ACCEL_MEMORY_FREE_BYTES] += (pos, mem.free)
        power = call(aip, "hlmlDeviceGetPowerUsage")
        if power is not None and power != U32_NA:
            rows[ACCEL_POWER_WATTS] += (pos, power / 1000)
        limit = call(aip, "hlmlDeviceGetPowerManagementLimit")
        if limit and limit != U32_NA:
            rows[ACCEL_POWER_LIMIT_WATTS] += (pos, limit / 1000)
        energy = call(aip, "hlmlDeviceGetTotalEnergyConsumption")
        if energy is not None and energy != U64_NA:
            joules, _watts = aip.energy.update(energy, time.monotonic())
            rows[ACCEL_ENERGY_JOULES_TOTAL] += (pos, joules)
        self._temperatures(aip, pos, rows)
        soc = call(aip, "hlmlDeviceGetClockInfo", 0)
        if soc and soc <= MAX_MHZ:
            rows[ACCEL_CLOCK_HERTZ] += (pos, "soc", soc * MHZ)
        reasons = call(aip, "hlmlDeviceGetCurrentClocksThrottleReasons")
        if reasons is not None and reasons != U64_NA:
            target = rows[ACCEL_CLOCK_THROTTLE_ACTIVE]
            for bit, name in THROTTLE_REASONS:
                target += (pos, name, 1 if reasons & bit else 0)
        for policy, name in VIOLATIONS:
            violation = call(aip, "hlmlDeviceGetViolationStatus", policy)
            if violation is not None and violation.violation_time != U64_NA:
                seconds = violation.violation_time / NANO
                rows[ACCEL_CLOCK_VIOLATION_SECONDS_TOTAL] += (pos, name, seconds)
        for fn, family in (
            ("hlmlDeviceGetPCIEReplayCounter", ACCEL_PCIE_REPLAYS_TOTAL),
            ("hlmlDeviceGetCurrPCIELinkGeneration", ACCEL_PCIE_LINK_GENERATION),
            ("hlmlDeviceGetCurrPCIELinkWidth", ACCEL_PCIE_LINK_WIDTH),
        ):
            value = call(aip, fn)
            if value is not None and value != U32_NA:
                put(rows, family, me, value)
        self._links(aip, pos, rows)

    def _temperatures(self, aip: Aip, pos: int, rows: Rows) -> None:
        """The sensors not found unsupported (since the last slow poll, which asks all)."""
        read, error, h = self.api.hlmlDeviceGetTemperature, self.api.HLMLError, aip.handle
        target = rows[ACCEL_TEMPERATURE_CELSIUS]
        for sensor, label in list(aip.sensors):
            try:
                celsius = read(h, sensor)
            except error as exc:
                if int(exc.value) == NOT_SUPPORTED:
                    aip.sensors.remove((sensor, label))
                self._failed(aip, "hlmlDeviceGetTemperature", exc)
                continue
            if celsius <= MAX_CELSIUS:
                target += (pos, label, celsius)

    def _links(self, aip: Aip, pos: int, rows: Rows) -> None:
        """NIC port link state: many ports per device, so one tight loop."""
        link, error, h = self.api.hlmlDeviceNicGetLink, self.api.HLMLError, aip.handle
        target = rows[ACCEL_GAUDI_NIC_PORT_UP]
        for port, label in aip.ports:
            try:
                up = link(h, port)
            except error as exc:
                self._failed(aip, "hlmlDeviceNicGetLink", exc)
                continue
            target += (pos, label, 1 if up else 0)

    def _slow(self, aip: Aip, out: Emitter) -> None:
        top = self._call(aip, "hlmlDeviceGetMaxClockInfo", 0)
        if top and top <= MAX_MHZ:
            out.scaled(ACCEL_CLOCK_MAX_HERTZ, top, MHZ, 1, "soc")
        for kind, type_name in ECC_TYPES:
            for counter, counter_name in ECC_COUNTERS:
                # A signed 64-bit answer in pyhlml: all ones reads as -1 (a sentinel).
                count = self._call(aip, "hlmlDeviceGetTotalECCErrors", kind, counter)
                if count is None or count >= 0:
                    out.add(ACCEL_ECC_ERRORS_TOTAL, count, type_name, counter_name)
        for cause, cause_name in ROW_CAUSES:
            replaced = self._call(aip, "hlmlDeviceGetReplacedRowsCount", cause)
            out.add(ACCEL_GAUDI_REPLACED_ROWS, replaced, cause_name)
        pending = self._call(aip, "hlmlDeviceGetReplacedRowsPendingStatus")
        if pending in (0, 1):
            out.add(ACCEL_GAUDI_ROW_REPLACEMENT_PENDING, pending)
        if self.config.get("nic_statistics", True):
            for port, label in aip.ports:
                self._nic_statistics(aip, out.position, port, label, out.rows)

    def _nic_statistics(self, aip: Aip, pos: int, port: int, label: str, rows: Rows) -> None:
        stats = self._call(aip, "hlmlDeviceNicGetStatistics", port)
        if stats is None:
            return
        count = min(int(stats.num_of_counters_out[0]), 256)  # pyhlml's buffers hold 256
        names = self._counter_names(ctypes.string_at(stats.str_buf, 32 * count))
        # Many counters a port: the contract's sentinel check, inlined.
        target, sentinels = rows[ACCEL_GAUDI_NIC_STATISTIC_TOTAL], SENTINELS
        values = stats.val_buf[:count]
        for k, name in names:
            if values[k] not in sentinels:
                target += (pos, label, name, values[k])

    def _counter_names(self, block: bytes) -> tuple[tuple[int, str], ...]:
        """(index, label) of each NIC counter name in a block of 32-byte names.

        Names are made label-safe; an empty or repeated one is left out. Every port
        of every device names the same counters, so a block is parsed once.
        """
        cached = self._names.get(block)
        if cached is not None:
            return cached
        seen: set[str] = set()
        out = []
        for k in range(len(block) // 32):
            raw = block[32 * k : 32 * (k + 1)].split(b"\0", 1)[0]
            name = _COUNTER_NAME.sub("_", raw.decode("ascii", "replace").lower()).strip("_")
            if name and name not in seen:
                seen.add(name)
                out.append((k, name))
        if len(self._names) < 64:  # a driver that changes its names every poll: no growth
            self._names[block] = tuple(out)
        return tuple(out)

    def close(self) -> None:
        """Shut HLML down (best effort: the process exits next)."""
        if self.api is not None:
            with contextlib.suppress(Exception):
                self.api.hlmlShutdown()
            self.api = None
