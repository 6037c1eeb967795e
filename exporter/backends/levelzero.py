"""Intel GPUs through Level Zero Sysman (``pyzes``), run inside a worker process.

``bootstrap()`` loads the loader named by ``library_path`` (see
:mod:`exporter.backends.levelzero_binding`), initialises Sysman with
``zesInit``, enumerates the GPUs of every driver (an NPU or VPU behind the same
loader is skipped) and learns each one's components: engine groups, memory
modules, power domains, frequency domains, temperature sensors, RAS error sets
and XeLink fabric ports. ``handle("poll", {"slow": ...})`` reads them.

Sysman reports cumulative counters, not rates: engine busy time, energy, PCIe
and fabric bytes. Ratios and watts come from the change since the previous
poll (:mod:`exporter.backends.counters`), so the first poll after a start has
none. A call that answers UNSUPPORTED_FEATURE (or the like) leaves its family
absent; INSUFFICIENT_PERMISSIONS (the ``xe`` driver serves engines and
temperatures to root only) too, with ``accel_intel_reading_denied_info``
saying so; DEVICE_LOST takes the device down with reason ``gpu_lost``.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows, put
from exporter.backends import levelzero_binding as zb
from exporter.backends.base import (
    BackendError,
    BackendUnavailable,
    InventoryChanged,
    unique_uuids,
)
from exporter.backends.contract import Codes, DeviceGone, Failing, count, poll_devices
from exporter.backends.counters import Delta, Energy
from exporter.host import libsearch

SOURCE = "levelzero"
ZE_DEVICE_TYPE_GPU = 1
ZES_MEM_LOC_DEVICE = 1
MHZ = 1_000_000

# Results that say "this reading does not exist here" rather than a fault.
ABSENT = frozenset(
    {zb.UNSUPPORTED_FEATURE, zb.UNSUPPORTED_ENUMERATION, zb.UNSUPPORTED_VERSION, zb.NOT_AVAILABLE}
)
# Results that end the device's poll, with the down reason.
DOWN = {
    zb.DEVICE_LOST: "gpu_lost",
    zb.DEVICE_REQUIRES_RESET: "reset_required",
    zb.SURVIVABILITY_MODE_DETECTED: "survivability_mode",
}
# The backend contract's table (exporter.backends.contract). INSUFFICIENT_PERMISSIONS
# is absent too, and also exported as accel_intel_reading_denied_info (see _bad).
CODES: Codes[int] = Codes(
    names=zb.RESULT_NAMES,
    absent=ABSENT | {zb.INSUFFICIENT_PERMISSIONS},
    gone=DOWN,
    unknown="ze_result_{:#x}",
)

# zes_engine_group_t *_ALL groups -> engine label (the single-engine groups are left out).
ENGINE_GROUPS = {
    0: "all",
    1: "compute",
    2: "media",
    3: "copy",
    11: "3d_render_compute",
    12: "render",
    13: "3d",
}
# Preference for accel_utilization_ratio: the busy share of the engines that run kernels.
UTILIZATION_FROM = ("compute", "3d_render_compute", "render", "all")
# zes_temp_sensors_t -> sensor label; the *_min sensors are minima, the others maxima.
SENSORS = {
    0: "global",
    1: "gpu",
    2: "memory",
    3: "global_min",
    4: "gpu_min",
    5: "memory_min",
    6: "board",  # the board's sensors, "board" as on Gaudi (catalog/vocabulary.py)
    7: "board_min",
    8: "voltage_regulator",
}
# zes_freq_domain_t -> clock label: the GPU core and media domains are the clocks
# NVIDIA and AMD call graphics and video (catalog/vocabulary.py).
CLOCKS = {0: "graphics", 1: "memory", 2: "video"}
# zes_freq_throttle_reason_flags_t bits -> reason label.
THROTTLE_REASONS = (
    (1, "ave_pwr_cap"),
    (2, "burst_pwr_cap"),
    (4, "current_limit"),
    (8, "thermal_limit"),
    (16, "psu_alert"),
    (32, "sw_range"),
    (64, "hw_range"),
    (128, "voltage"),
    (256, "thermal"),
    (512, "power"),
)
# zes_ras_error_type_t (0 correctable, 1 uncorrectable) -> accel_ecc_errors_total type:
# the words every vendor uses (catalog/vocabulary.py).
ECC_TYPES = ("corrected", "uncorrected")
RAS_CATEGORIES = (
    "reset",
    "programming",
    "driver",
    "compute",
    "non_compute",
    "cache",
    "display",
)
RAS_FAMILIES = (
    "accel_intel_ras_correctable_errors_total",
    "accel_intel_ras_uncorrectable_errors_total",
)
# zes_reset_reason_flag_t bits -> accel_intel_reset_reason_info's reason label.
RESET_REASONS = ((1, "wedged"), (2, "repair"))
# zes_fabric_port_status_t: HEALTHY 1 and DEGRADED 2 carry traffic.
PORT_UP = frozenset({1, 2})
# Readings above these are garbage, not measurements.
MAX_CELSIUS = 250.0
MAX_MHZ = 100_000.0


# The pyzes functions each reading calls: a loader older than pyzes may lack some, and
# pyzes raises AttributeError for those, so a reading whose functions are not all
# there is left out from the start.
READING_FUNCTIONS = {
    "engines": ("zesDeviceEnumEngineGroups", "zesEngineGetProperties", "zesEngineGetActivity"),
    "memory": ("zesDeviceEnumMemoryModules", "zesMemoryGetProperties", "zesMemoryGetState"),
    "memory_bandwidth": ("zesMemoryGetBandwidth",),
    "power": ("zesDeviceEnumPowerDomains", "zesPowerGetProperties", "zesPowerGetEnergyCounter"),
    "clocks": (
        "zesDeviceEnumFrequencyDomains",
        "zesFrequencyGetProperties",
        "zesFrequencyGetState",
    ),
    "temperature": (
        "zesDeviceEnumTemperatureSensors",
        "zesTemperatureGetProperties",
        "zesTemperatureGetState",
    ),
    "pcie": ("zesDevicePciGetProperties", "zesDevicePciGetStats", "zesDevicePciGetState"),
}


def text(raw: bytes) -> str:
    """A Sysman string: decoded, printable, and empty for the spec's "unknown"."""
    value = raw.decode("utf-8", "replace")
    value = "".join(ch for ch in value if ch.isprintable()).strip()
    return "" if value.lower() == "unknown" else value


def _finite(value: float, low: float, high: float) -> bool:
    """False for the spec's -1 "unknown", NaN and values outside the range."""
    return math.isfinite(value) and low <= value <= high


@dataclass
class Component:
    """One Sysman component handle, its fixed properties and its previous sample."""

    handle: Any
    kind: int = 0
    tile: int = 0
    size: int = 0
    label: str = ""
    delta: Delta = field(default_factory=Delta)
    tx: Delta = field(default_factory=Delta)


@dataclass
class Gpu:
    """One enumerated Intel GPU: handle, identity and components."""

    index: int
    handle: Any
    device: str
    uuid: str
    info: dict[str, str]
    engines: list[Component] = field(default_factory=list)
    # Engine groups of each label (one per tile).
    tiles_of: dict[str, int] = field(default_factory=dict)
    memory: list[Component] = field(default_factory=list)
    power: list[Component] = field(default_factory=list)
    clocks: list[Component] = field(default_factory=list)
    sensors: list[Component] = field(default_factory=list)
    ras: list[Component] = field(default_factory=list)
    ports: list[Component] = field(default_factory=list)
    pci_max: tuple[int, int] = (-1, -1)
    have_bandwidth: bool = False
    have_replay: bool = False
    energy: Energy = field(default_factory=lambda: Energy(1_000_000))
    pci_rx: Delta = field(default_factory=Delta)
    pci_tx: Delta = field(default_factory=Delta)
    # Readings the driver refused to this process (INSUFFICIENT_PERMISSIONS).
    denied: set[str] = field(default_factory=set)
    unidentified: str = ""
    down: str = ""
    # Readings that failed (not absent, not denied) since the worker started, by reason.
    errors: dict[str, int] = field(default_factory=dict)


class Structs:
    """Output structs the fast readings reuse (and their byref()s), made once."""

    def __init__(self, ze: Any) -> None:
        self.mem_state = ze.zes_mem_state_t()
        self.mem_state_ref = ctypes.byref(self.mem_state)
        self.mem_bandwidth = ze.zes_mem_bandwidth_t()
        self.mem_bandwidth_ref = ctypes.byref(self.mem_bandwidth)
        self.energy = ze.zes_power_energy_counter_t()
        self.energy_ref = ctypes.byref(self.energy)
        self.engine = ze.zes_engine_stats_t()
        self.engine_ref = ctypes.byref(self.engine)
        self.double = ctypes.c_double()
        self.double_ref = ctypes.byref(self.double)
        self.freq = ze.zes_freq_state_t()
        self.freq_ref = ctypes.byref(self.freq)
        self.pci_stats = ze.zes_pci_stats_t()
        self.pci_stats_ref = ctypes.byref(self.pci_stats)
        self.pci_state = ze.zes_pci_state_t()
        self.pci_state_ref = ctypes.byref(self.pci_state)
        self.port_state = zb.FabricPortState()
        self.port_state_ref = ctypes.byref(self.port_state)
        self.port_throughput = zb.FabricPortThroughput()
        self.port_throughput_ref = ctypes.byref(self.port_throughput)


class LevelZeroBackend:
    """The ``levelzero`` device backend (see the module docstring)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.ze: Any = None
        self.extra: zb.Extra | None = None
        self._structs: Structs  # made by bootstrap, once the binding is loaded
        # Readings whose functions the loaded library lacks (READING_FUNCTIONS).
        self._lacking: set[str] = set()
        self.gpus: list[Gpu] = []
        self._log = log.get(source=SOURCE)
        self._failing = Failing(self._log)

    # -- bootstrap -------------------------------------------------------------

    def bootstrap(self) -> dict[str, Any]:
        """Load the loader, initialise Sysman, describe every GPU."""
        found = libsearch.find(libsearch.LEVELZERO, str(self.config.get("library_path") or ""))
        ze = self.ze = zb.load(found)
        path = found.path
        self.extra = zb.Extra(ze.gpuLib)
        self._structs = Structs(ze)
        lacking = [
            name
            for names in READING_FUNCTIONS.values()
            for name in names
            if not hasattr(ze.gpuLib, name)
        ]
        self._lacking = {r for r, names in READING_FUNCTIONS.items() if set(names) & set(lacking)}
        if self.extra.missing or lacking:
            self._log.warning(
                "the Level Zero loader lacks entry points; their readings are omitted",
                missing=[*lacking, *self.extra.missing],
            )
        try:
            rc = int(ze.zesInit(0))
        except AttributeError as exc:
            raise BackendUnavailable("library_mismatch", f"{path} has no zesInit: {exc}") from None
        if rc == zb.UNINITIALIZED:
            raise BackendUnavailable(
                "driver_not_loaded",
                "zesInit: no Level Zero driver answered (is the i915 or xe driver and"
                " intel-level-zero-gpu installed?)",
            )
        if rc != zb.SUCCESS:
            raise BackendError(zb.result_name(rc), f"zesInit failed: {zb.result_name(rc)}")
        handles = self._device_handles()
        for index in crumb.wanted(self.config, len(handles)):
            crumb.device(index)
            gpu = self._describe(index, handles[index])
            if gpu is not None:
                self.gpus.append(gpu)
        crumb.clear()
        if not self.gpus:
            raise BackendUnavailable("no_devices", "Level Zero Sysman found no Intel GPU")
        uuids = unique_uuids([(g.device, g.uuid) for g in self.gpus], "intel-gpu-")
        for gpu, uuid in zip(self.gpus, uuids, strict=True):
            gpu.uuid = uuid
        self._log.info("levelzero ready", devices=len(self.gpus), enumerated=len(handles))
        return {
            "vendor": "intel",
            "devices": [
                {"device": g.device, "uuid": g.uuid, "info": g.info, "index": g.index}
                for g in self.gpus
            ],
        }

    def _device_handles(self) -> list[Any]:
        """Every device of every driver, in the loader's order."""
        ze = self.ze
        count = ctypes.c_uint32(0)
        rc = int(ze.zesDriverGet(ctypes.byref(count), None))
        if rc != zb.SUCCESS:
            raise BackendError("enumeration_failed", f"zesDriverGet: {zb.result_name(rc)}")
        drivers = (ze.zes_driver_handle_t * count.value)()
        check_enum = int(ze.zesDriverGet(ctypes.byref(count), drivers))
        if check_enum != zb.SUCCESS:
            raise BackendError("enumeration_failed", f"zesDriverGet: {zb.result_name(check_enum)}")
        out: list[Any] = []
        for driver in drivers[: count.value]:
            n = ctypes.c_uint32(0)
            rc = int(ze.zesDeviceGet(driver, ctypes.byref(n), None))
            if rc != zb.SUCCESS:
                raise BackendError("enumeration_failed", f"zesDeviceGet: {zb.result_name(rc)}")
            devices = (ze.zes_device_handle_t * n.value)()
            rc = int(ze.zesDeviceGet(driver, ctypes.byref(n), devices))
            if rc != zb.SUCCESS:
                raise BackendError("enumeration_failed", f"zesDeviceGet: {zb.result_name(rc)}")
            out.extend(devices[: n.value])
        return out

    def _describe(self, index: int, handle: Any) -> Gpu | None:
        """A GPU's identity and components; None for a device that is not a GPU."""
        ze = self.ze
        props = ze.zes_device_properties_t()
        props.stype = ze.ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
        rc = int(ze.zesDeviceGetProperties(handle, ctypes.byref(props)))
        if rc:
            # Kept in the inventory, down, so a GPU lost before the worker started shows.
            reason = CODES.down(rc)
            self._log.warning("device unidentified", device=index, reason=reason)
            return Gpu(index, handle, str(index), "", {}, unidentified=reason)
        if props.core.type != ZE_DEVICE_TYPE_GPU:
            return None
        pci = ze.zes_pci_properties_t()
        pci.stype = ze.ZES_STRUCTURE_TYPE_PCI_PROPERTIES
        bdf = ""
        gpu_uuid = _uuid(bytes(props.core.uuid.id))
        crumb.identity(f"uuid={gpu_uuid}")
        gpu = Gpu(index, handle, str(index), gpu_uuid, {})
        # Without PCI properties the GPU is still described (no bus id, no link maxima).
        if "pcie" not in self._lacking and not ze.zesDevicePciGetProperties(
            handle, ctypes.byref(pci)
        ):
            a = pci.address
            bdf = f"{a.domain:04x}:{a.bus:02x}:{a.device:02x}.{a.function:x}"
            gpu.pci_max = (int(pci.maxSpeed.gen), int(pci.maxSpeed.width))
            gpu.have_bandwidth = bool(pci.haveBandwidthCounters)
            gpu.have_replay = bool(pci.haveReplayCounters)
        crumb.identity(f"uuid={gpu_uuid};pci_bus_id={bdf}")
        if not gpu.uuid and bdf:
            gpu.uuid = f"pci-{bdf}"
        gpu.info = {
            "model": text(props.modelName) or text(props.core.name),
            "pci_bus_id": bdf,
            "serial": text(props.serialNumber),
            "driver_version": text(props.driverVersion),
        }
        try:
            self._components(gpu)
        except DeviceGone as exc:
            gpu.unidentified = exc.reason
        return gpu

    def _components(self, gpu: Gpu) -> None:
        """Enumerate the GPU's components and read their fixed properties."""
        ze, h = self.ze, gpu.handle
        for c in self._enum(gpu, "engines", ze.zesDeviceEnumEngineGroups, ze.zes_engine_handle_t):
            p = ze.zes_engine_properties_t()
            p.stype = ze.ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES
            if self._ok(gpu, "engines", ze.zesEngineGetProperties, c.handle, p) and (
                p.type in ENGINE_GROUPS
            ):
                c.kind, c.tile, c.label = p.type, p.subdeviceId, ENGINE_GROUPS[p.type]
                gpu.engines.append(c)
                gpu.tiles_of[c.label] = gpu.tiles_of.get(c.label, 0) + 1
        for c in self._enum(gpu, "memory", ze.zesDeviceEnumMemoryModules, ze.zes_mem_handle_t):
            p = ze.zes_mem_properties_t()
            p.stype = ze.ZES_STRUCTURE_TYPE_MEM_PROPERTIES
            if self._ok(gpu, "memory", ze.zesMemoryGetProperties, c.handle, p) and (
                p.location == ZES_MEM_LOC_DEVICE
            ):
                c.size = int(p.physicalSize) if 0 < p.physicalSize < 1 << 62 else 0
                gpu.memory.append(c)
        # The energy counter of the whole card: the first domain not on a tile.
        for c in self._enum(gpu, "power", ze.zesDeviceEnumPowerDomains, ze.zes_pwr_handle_t):
            p = ze.zes_power_properties_t()
            p.stype = ze.ZES_STRUCTURE_TYPE_POWER_PROPERTIES
            if self._ok(gpu, "power", ze.zesPowerGetProperties, c.handle, p) and not p.onSubdevice:
                gpu.power = [c]
                break
        for c in self._enum(gpu, "clocks", ze.zesDeviceEnumFrequencyDomains, ze.zes_freq_handle_t):
            p = ze.zes_freq_properties_t()
            p.stype = ze.ZES_STRUCTURE_TYPE_FREQ_PROPERTIES
            if self._ok(gpu, "clocks", ze.zesFrequencyGetProperties, c.handle, p) and (
                p.type in CLOCKS
            ):
                c.kind, c.label = p.type, CLOCKS[p.type]
                c.size = int(p.max * MHZ) if _finite(p.max, 1.0, MAX_MHZ) else 0
                gpu.clocks.append(c)
        for c in self._enum(
            gpu, "temperature", ze.zesDeviceEnumTemperatureSensors, ze.zes_temp_handle_t
        ):
            p = ze.zes_temp_properties_t()
            p.stype = ze.ZES_STRUCTURE_TYPE_TEMP_PROPERTIES
            if self._ok(gpu, "temperature", ze.zesTemperatureGetProperties, c.handle, p) and (
                p.type in SENSORS
            ):
                c.kind, c.label = p.type, SENSORS[p.type]
                gpu.sensors.append(c)
        self._extra_components(gpu, h)

    def _extra_components(self, gpu: Gpu, h: Any) -> None:
        """RAS error sets and fabric ports, through the entry points pyzes lacks."""
        assert self.extra is not None
        for c in self._enum_extra(gpu, "ras", "zesDeviceEnumRasErrorSets", h):
            p = zb.RasProperties(stype=zb.STYPE_RAS_PROPERTIES)
            if self._ok_extra(gpu, "ras", "zesRasGetProperties", c.handle, p) and p.type in (0, 1):
                c.kind = p.type
                gpu.ras.append(c)
        for c in self._enum_extra(gpu, "fabric", "zesDeviceEnumFabricPorts", h):
            port = zb.FabricPortProperties(stype=zb.STYPE_FABRIC_PORT_PROPERTIES)
            if self._ok_extra(gpu, "fabric", "zesFabricPortGetProperties", c.handle, port):
                pid = port.portId
                c.label = f"{pid.fabricId}.{pid.attachId}.{pid.portNumber}"
                gpu.ports.append(c)

    def _enum(self, gpu: Gpu, reading: str, fn: Callable[..., int], kind: Any) -> list[Component]:
        """The two-call enumeration; an empty list when the device offers none."""
        if reading in self._lacking:
            return []
        n = ctypes.c_uint32(0)
        rc = int(fn(gpu.handle, ctypes.byref(n), None))
        handles = (kind * (0 if rc else n.value))()
        if not rc and n.value:
            rc = int(fn(gpu.handle, ctypes.byref(n), handles))
        if rc:
            self._bad(gpu, reading, rc)
            return []
        return [Component(h) for h in handles[: n.value]]

    def _enum_extra(self, gpu: Gpu, reading: str, name: str, h: Any) -> list[Component]:
        assert self.extra is not None
        n = ctypes.c_uint32(0)
        rc = self.extra.call(name, h, ctypes.byref(n), None)
        handles = (ctypes.c_void_p * (0 if rc else n.value))()
        if not rc and n.value:
            rc = self.extra.call(name, h, ctypes.byref(n), handles)
        if rc:
            self._bad(gpu, reading, rc)
            return []
        return [Component(ctypes.c_void_p(x)) for x in handles[: n.value]]

    def _ok(self, gpu: Gpu, reading: str, fn: Callable[..., int], handle: Any, out: Any) -> bool:
        return self._read(gpu, reading, fn, handle, ctypes.byref(out))

    def _ok_extra(self, gpu: Gpu, reading: str, name: str, handle: Any, out: Any) -> bool:
        assert self.extra is not None
        rc = self.extra.call(name, handle, ctypes.byref(out))
        if rc:
            self._bad(gpu, reading, rc)
        return not rc

    # -- requests --------------------------------------------------------------

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``; anything else is an error."""
        if op != "poll":
            raise BackendError("unknown_op", f"the levelzero backend has no operation {op!r}")
        return poll_devices(self.gpus, bool(args.get("slow")), self._poll_gpu, self._log, SOURCE)

    def _poll_gpu(self, gpu: Gpu, position: int, rows: Rows, slow: Rows | None) -> None:
        """Read one GPU into the reply's rows; DeviceGone when it is down."""
        if gpu.unidentified:
            if slow is not None:
                self._identify_again(gpu)
            raise DeviceGone(gpu.unidentified, "not identified when the worker started")
        self._fast(gpu, position, rows)
        if slow is not None:
            self._slow(gpu, position, slow)

    def _identify_again(self, gpu: Gpu) -> None:
        """InventoryChanged when a GPU unidentified at bootstrap answers now.

        It is listed under a placeholder uuid with no components, so it could only
        ever be reported down; a new worker enumerates it properly.
        """
        props = self.ze.zes_device_properties_t()
        props.stype = self.ze.ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
        if int(self.ze.zesDeviceGetProperties(gpu.handle, ctypes.byref(props))) == zb.SUCCESS:
            raise InventoryChanged(f"GPU {gpu.device} answers again")

    def _read(self, gpu: Gpu, reading: str, fn: Callable[..., int], *args: Any) -> bool:
        """One reading call; False (and noted, see _bad) when it yields nothing."""
        rc = int(fn(*args))
        if rc:
            self._bad(gpu, reading, rc)
        return not rc

    def _bad(self, gpu: Gpu, reading: str, rc: int) -> None:
        """A reading call did not succeed: DeviceGone, denied, absent, or a counted failure.

        A denied reading is exported (accel_intel_reading_denied_info) and logged
        once; a failure is counted and logged once; an absent one is neither.
        """
        if rc == zb.INSUFFICIENT_PERMISSIONS:
            gpu.denied.add(reading)
            self._failing.note(gpu, reading, CODES.reason(rc))
            return
        reason = CODES.failed(rc, reading)
        if reason:
            count(gpu.errors, reason)
            self._failing.note(gpu, reading, reason)

    # The fast readings call the library directly and test the result inline: they run
    # for every component of every device on every poll (bench/poll.py measures them;
    # adding through the contract's Emitter cost 20-40 % more CPU a poll). Sysman has no
    # sentinel encoding to drop: its "unknown" (-1) fails each reading's range test.

    def _fast(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        ze, s = self.ze, self._structs
        self._engines(gpu, pos, rows)
        total = free = reads = writes = 0
        have_bw, sane = False, True
        bandwidth_lacking = "memory_bandwidth" in self._lacking
        state, bw = s.mem_state, s.mem_bandwidth
        for c in gpu.memory:
            state.stype = ze.ZES_STRUCTURE_TYPE_MEM_STATE
            rc = ze.zesMemoryGetState(c.handle, s.mem_state_ref)
            if rc:
                self._bad(gpu, "memory", rc)
            else:
                total += c.size
                free += state.free
                # More free than the module holds is garbage: no memory figures this poll.
                sane = sane and (not c.size or state.free <= c.size)
            if bandwidth_lacking:
                continue
            rc = ze.zesMemoryGetBandwidth(c.handle, s.mem_bandwidth_ref)
            if rc:
                self._bad(gpu, "memory_bandwidth", rc)
            else:
                reads += bw.readCounter
                writes += bw.writeCounter
                have_bw = True
        if gpu.memory and sane and (total or free):
            rows["accel_memory_free_bytes"] += (pos, free)
            if total >= free:
                rows["accel_memory_total_bytes"] += (pos, total)
                rows["accel_memory_used_bytes"] += (pos, total - free)
        if have_bw:
            rows["accel_intel_memory_read_bytes_total"] += (pos, reads)
            rows["accel_intel_memory_write_bytes_total"] += (pos, writes)
        for c in gpu.power:
            rc = ze.zesPowerGetEnergyCounter(c.handle, s.energy_ref)
            if rc:
                self._bad(gpu, "power", rc)
                continue
            joules, watts = gpu.energy.update(s.energy.energy, s.energy.timestamp / 1e6)
            rows["accel_energy_joules_total"] += (pos, joules)
            if watts is not None:
                rows["accel_power_watts"] += (pos, watts)
        self._temperatures(gpu, pos, rows)
        self._clocks(gpu, pos, rows)
        self._pci(gpu, pos, rows)
        if gpu.ports:
            self._ports(gpu, pos, rows)
        for reading in sorted(gpu.denied):
            rows["accel_intel_reading_denied_info"] += (pos, reading, 1)

    def _engines(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        activity, stats, ref = (
            self.ze.zesEngineGetActivity,
            self._structs.engine,
            self._structs.engine_ref,
        )
        busy: dict[str, list[float]] = {}
        for c in gpu.engines:
            rc = activity(c.handle, ref)
            if rc:
                self._bad(gpu, "engines", rc)
                continue
            ratio = c.delta.rate(stats.activeTime, stats.timestamp)
            if ratio is not None and ratio <= 1.0:
                if c.label in busy:
                    busy[c.label].append(ratio)
                else:
                    busy[c.label] = [ratio]
        if not busy:
            return
        target = rows["accel_intel_engine_utilization_ratio"]
        means = {}
        for label, ratios in busy.items():
            # A tile without a ratio this poll (a counter reset) would skew the mean.
            if len(ratios) == gpu.tiles_of[label]:
                means[label] = mean = sum(ratios) / len(ratios)
                target += (pos, label, mean)
        # The group the device has (not merely the one that answered this poll).
        for label in UTILIZATION_FROM:
            if label in gpu.tiles_of:
                if label in means:
                    rows["accel_utilization_ratio"] += (pos, means[label])
                break

    def _temperatures(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        read, value, ref = (
            self.ze.zesTemperatureGetState,
            self._structs.double,
            self._structs.double_ref,
        )
        seen: dict[str, float] = {}
        for c in gpu.sensors:
            rc = read(c.handle, ref)
            if rc:
                self._bad(gpu, "temperature", rc)
                continue
            v = value.value
            # -1 is the spec's "unknown"; a sensor reading below freezing on a GPU is too.
            if not 0.0 <= v <= MAX_CELSIUS:  # NaN fails both comparisons
                continue
            # Several sensors of one type (one per tile): the extreme is what matters.
            if c.label in seen:
                v = min(v, seen[c.label]) if c.label.endswith("_min") else max(v, seen[c.label])
            seen[c.label] = v
        if seen:
            target = rows["accel_temperature_celsius"]
            for label, v in seen.items():
                target += (pos, label, v)

    def _clocks(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        ze = self.ze
        state, ref = self._structs.freq, self._structs.freq_ref
        reasons = 0
        throttle_known = False
        for c in gpu.clocks:
            state.stype = ze.ZES_STRUCTURE_TYPE_FREQ_STATE
            rc = ze.zesFrequencyGetState(c.handle, ref)
            if rc:
                self._bad(gpu, "clocks", rc)
                continue
            if 0.0 <= state.actual <= MAX_MHZ:
                rows["accel_clock_hertz"] += (pos, c.label, state.actual * MHZ)
            if c.kind == 0:  # the GPU domain's throttling is the device's
                reasons |= state.throttleReasons
                throttle_known = True
        if throttle_known:
            target = rows["accel_clock_throttle_active"]
            for bit, name in THROTTLE_REASONS:
                target += (pos, name, 1 if reasons & bit else 0)

    def _pci(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        if "pcie" in self._lacking:
            return
        ze, s = self.ze, self._structs
        stats = s.pci_stats
        if gpu.have_bandwidth or gpu.have_replay:
            rc = ze.zesDevicePciGetStats(gpu.handle, s.pci_stats_ref)
            if rc:
                self._bad(gpu, "pcie", rc)
            else:
                if gpu.have_replay:
                    rows["accel_pcie_replays_total"] += (pos, stats.replayCounter)
                if gpu.have_bandwidth:
                    seconds = stats.timestamp / 1e6
                    rx = gpu.pci_rx.rate(stats.rxCounter, seconds)
                    tx = gpu.pci_tx.rate(stats.txCounter, seconds)
                    if rx is not None:
                        rows["accel_pcie_rx_bytes_per_second"] += (pos, rx)
                    if tx is not None:
                        rows["accel_pcie_tx_bytes_per_second"] += (pos, tx)
        state = s.pci_state
        state.stype = ze.ZES_STRUCTURE_TYPE_PCI_STATE
        rc = ze.zesDevicePciGetState(gpu.handle, s.pci_state_ref)
        if rc:
            self._bad(gpu, "pcie", rc)
            return
        speed = state.speed
        if 0 < speed.gen <= 64:
            rows["accel_pcie_link_generation"] += (pos, speed.gen)
        if 0 < speed.width <= 64:
            rows["accel_pcie_link_width"] += (pos, speed.width)

    def _ports(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        assert self.extra is not None
        get_state = self.extra.function("zesFabricPortGetState")
        get_throughput = self.extra.function("zesFabricPortGetThroughput")
        s = self._structs
        state, through = s.port_state, s.port_throughput
        for c in gpu.ports:
            if get_state is not None:
                state.stype = zb.STYPE_FABRIC_PORT_STATE
                rc = get_state(c.handle, s.port_state_ref)
                if rc:
                    self._bad(gpu, "fabric", rc)
                else:
                    up = 1 if state.status in PORT_UP else 0
                    rows["accel_intel_fabric_port_up"] += (pos, c.label, up)
            if get_throughput is not None:
                rc = get_throughput(c.handle, s.port_throughput_ref)
                if rc:
                    self._bad(gpu, "fabric", rc)
                else:
                    rows["accel_intel_fabric_rx_bytes_total"] += (pos, c.label, through.rxCounter)
                    rows["accel_intel_fabric_tx_bytes_total"] += (pos, c.label, through.txCounter)

    def _slow(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        assert self.extra is not None
        me = (pos,)
        for c in gpu.clocks:
            if c.size:
                put(rows, "accel_clock_max_hertz", (pos, c.label), c.size)
        gen, width = gpu.pci_max
        if 0 < gen <= 64:
            put(rows, "accel_pcie_link_max_generation", me, gen)
        if 0 < width <= 64:
            put(rows, "accel_pcie_link_max_width", me, width)
        ze = self.ze
        health = 0
        state = ze.zes_mem_state_t()
        for c in gpu.memory:
            state.stype = ze.ZES_STRUCTURE_TYPE_MEM_STATE
            read = self._read(gpu, "memory", ze.zesMemoryGetState, c.handle, ctypes.byref(state))
            if read and 0 < state.health <= 4:
                health = max(health, int(state.health))
        if health:
            put(rows, "accel_intel_memory_health", me, health)
        dev_state = zb.DeviceState(stype=zb.STYPE_DEVICE_STATE)
        if self._ok_extra(gpu, "device_state", "zesDeviceGetState", gpu.handle, dev_state):
            put(rows, "accel_intel_reset_required", me, 1 if dev_state.reset else 0)
            for bit, reason in RESET_REASONS:
                if dev_state.reset & bit:
                    put(rows, "accel_intel_reset_reason_info", (pos, reason), 1)
        totals: list[list[int]] = [[0] * len(RAS_CATEGORIES), [0] * len(RAS_CATEGORIES)]
        seen = [False, False]
        ras = zb.RasState()
        for c in gpu.ras:
            ras.stype = zb.STYPE_RAS_STATE
            # clear=0 always: clearing resets the counters for every reader, and needs root.
            rc = self.extra.call("zesRasGetState", c.handle, 0, ctypes.byref(ras))
            if rc:
                self._bad(gpu, "ras", rc)
                continue
            seen[c.kind] = True
            for i in range(len(RAS_CATEGORIES)):
                totals[c.kind][i] += int(ras.category[i])
        for kind, family in enumerate(RAS_FAMILIES):
            if seen[kind]:
                for name, count in zip(RAS_CATEGORIES, totals[kind], strict=True):
                    put(rows, family, (pos, name), count)
        self._ecc(gpu, pos, rows)

    def _ecc(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        """Memory (ECC) errors: the MEMORY_ERRORS category of zesRasGetStateExp."""
        assert self.extra is not None
        totals = [0, 0]
        seen = [False, False]
        for c in gpu.ras:
            n = ctypes.c_uint32(0)
            rc = self.extra.call("zesRasGetStateExp", c.handle, ctypes.byref(n), None)
            if not rc:
                states = (zb.RasStateExp * min(n.value, 64))()
                n.value = len(states)
                rc = self.extra.call("zesRasGetStateExp", c.handle, ctypes.byref(n), states)
            if rc:
                self._bad(gpu, "ras", rc)
                continue
            for state in states[: n.value]:
                if state.category == zb.RAS_CATEGORY_EXP_MEMORY:
                    totals[c.kind] += int(state.errorCounter)
                    seen[c.kind] = True
        for kind, type_name in enumerate(ECC_TYPES):
            if seen[kind]:
                put(rows, "accel_ecc_errors_total", (pos, type_name, ""), totals[kind])

    def close(self) -> None:
        """Nothing to release: Sysman has no shutdown call and the process exits next."""
        self.gpus = []


def _uuid(raw: bytes) -> str:
    """The 16 uuid bytes as 8-4-4-4-12 hex; empty when all zero (not known)."""
    if not any(raw):
        return ""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
