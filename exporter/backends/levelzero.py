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

This module is the bootstrap and the request loop; the readings a poll takes are
:mod:`exporter.backends.levelzero_read`, the tables and device records both use
:mod:`exporter.backends.levelzero_tables`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows
from exporter.backends import levelzero_binding as zb
from exporter.backends.base import (
    BackendError,
    BackendUnavailable,
    InventoryChanged,
    unique_uuids,
)
from exporter.backends.contract import (
    MAX_MHZ,
    MHZ,
    DeviceGone,
    Failing,
    expect_poll,
    not_identified,
    poll_devices,
    within,
)
from exporter.backends.levelzero_read import Readings
from exporter.backends.levelzero_tables import (
    CLOCKS,
    CODES,
    ENGINE_GROUPS,
    READING_FUNCTIONS,
    SENSORS,
    SOURCE,
    ZE_DEVICE_TYPE_GPU,
    ZES_MEM_LOC_DEVICE,
    Component,
    Gpu,
    Structs,
    text,
    uuid_text,
)

# Named here too, as the label-value tests and docs name them: the backend's label tables.
from exporter.backends.levelzero_tables import ECC_TYPES as ECC_TYPES
from exporter.backends.levelzero_tables import THROTTLE_REASONS as THROTTLE_REASONS
from exporter.host import libsearch


class LevelZeroBackend(Readings):
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
        gpu_uuid = uuid_text(bytes(props.core.uuid.id))
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
                c.size = int(p.max * MHZ) if within(p.max, 1.0, MAX_MHZ) else 0
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

    # -- requests --------------------------------------------------------------

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``; anything else is an error."""
        expect_poll(op, SOURCE)
        return poll_devices(self.gpus, bool(args.get("slow")), self._poll_gpu, self._log, SOURCE)

    def _poll_gpu(self, gpu: Gpu, position: int, rows: Rows, slow: Rows | None) -> None:
        """Read one GPU into the reply's rows; DeviceGone when it is down."""
        if gpu.unidentified:
            not_identified(
                gpu.unidentified, None if slow is None else lambda: self._identify_again(gpu)
            )
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

    # The fast readings call the library directly and test the result inline: they run
    # for every component of every device on every poll (bench/poll.py measures them;
    # adding through the contract's Emitter cost 20-40 % more CPU a poll). Sysman has no
    # sentinel encoding to drop: its "unknown" (-1) fails each reading's range test.

    def close(self) -> None:
        """Nothing to release: Sysman has no shutdown call and the process exits next."""
        self.gpus = []
