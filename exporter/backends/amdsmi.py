"""AMD GPUs through the amdsmi Python package (7.x), inside a worker process.

``bootstrap`` imports amdsmi (which loads ``libamd_smi.so`` from ROCM_HOME /
ROCM_PATH / the linker path at import), initialises it for GPUs, enumerates
the devices and reads their static identity. ``poll`` reads every device; a
device whose calls say it is gone is reported ``up: false`` with reason
``gpu_lost`` while the others carry on. Event notifications are counted on a
thread (:mod:`exporter.backends.amdsmi_events`). The wire shapes are those of
:mod:`exporter.sources.device`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.cper import Ledger, LedgerError
from exporter.backend_api.wire import Rows, merge
from exporter.backends.amdsmi_binding import AmdBinding
from exporter.backends.amdsmi_domains import read_domains
from exporter.backends.amdsmi_events import EventWatcher, Watched
from exporter.backends.amdsmi_fields import FAST, DeviceReader, read_processes, status_name
from exporter.backends.amdsmi_load import load_amdsmi
from exporter.backends.amdsmi_ras import CperReader, export_ledger, read_bad_pages
from exporter.backends.amdsmi_slow import read_ecc, read_limits, read_partition
from exporter.backends.base import (
    BackendError,
    BackendUnavailable,
    InventoryChanged,
    unique_uuids,
)
from exporter.backends.contract import DeviceGone, Failing, count, expect_poll, poll_devices
from exporter.catalog.vocabulary import AMD_HEALTH_EVENTS
from exporter.family_names import ACCEL_AMD_BOARD_INFO

SOURCE = "amdsmi"
# CPER records read per GPU and poll: a burst drains over several polls.
CPER_PER_POLL = 256
# Compute partition modes of an unpartitioned GPU ("" when amdsmi does not say).
UNPARTITIONED = frozenset({"", "SPX"})
# The compute partition mode by the number of partitions of the GPU (AMD's names).
MODES = {1: "SPX", 2: "DPX", 3: "TPX", 4: "QPX", 8: "CPX"}
# amdsmi_init statuses that mean "no usable AMD GPU driver here" rather than a fault.
NO_DRIVER = frozenset({"driver_not_loaded", "no_drv", "file_not_found", "directory_not_found"})


@dataclass
class Gpu:
    """One enumerated device: its handle and identity."""

    handle: Any
    device: str
    uuid: str
    info: dict[str, str]
    # False when the device was lost while the worker read its identity.
    identified: bool = True
    # A partition of a partitioned GPU, and which (its XCP; None when unknown).
    partitioned: bool = False
    xcp: int | None = None
    # The physical GPU it belongs to (see _parents): partitions of one GPU share it.
    parent: str = ""
    # The board part number (board_info model_number): a partition has its GPU's.
    part_number: str = ""
    # The reason it was down at the last poll ("" when up), to log changes only.
    down: str = ""
    # Items of answers skipped as malformed since the worker started, by reason.
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    # Row prefixes of this device's readings, shared across polls (contract.Emitter).
    prefixes: dict[tuple[str, ...], tuple[Any, ...]] = dataclasses.field(default_factory=dict)

    @property
    def index(self) -> int:
        """Amdsmi's index of the device (the ``device`` label)."""
        return int(self.device)

    @property
    def primary(self) -> bool:
        """Whether this device speaks for its physical GPU (RAS is per GPU, not partition)."""
        return not self.partitioned or self.xcp == 0


def _share_partition_modes(gpus: list[Gpu]) -> None:
    """A partition that does not report its GPU's memory partition mode gets its sibling's.

    Bare-metal amdsmi reports the modes through a GPU's first partition only.
    """
    modes: dict[str, str] = {}
    for gpu in gpus:
        physical, mode = gpu.info.get("physical_gpu", ""), gpu.info.get("memory_partition", "")
        if physical and mode:
            modes.setdefault(physical, mode)
    for gpu in gpus:
        physical = gpu.info.get("physical_gpu", "")
        if physical and not gpu.info.get("memory_partition") and physical in modes:
            gpu.info["memory_partition"] = modes[physical]


def _text(value: Any) -> str:
    """A string field, with amdsmi's "N/A" and blanks as empty."""
    if not isinstance(value, str):
        return ""
    value = value.strip()
    return "" if value in ("N/A", "") else value


def _is_bdf(text: str) -> bool:
    """Whether ``text`` is a full PCI address, domain to function (``0000:0c:00.0``)."""
    return (
        re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", text.strip().lower())
        is not None
    )


class AmdSmiBackend:
    """The amdsmi backend (runs in the worker child)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.api: Any = None
        self.gpus: list[Gpu] = []
        self.events: EventWatcher | None = None
        self._names: dict[int, str] = {}
        # Processor index -> its PCI address from the socket layout (see _parents).
        self._addresses: dict[int, str] = {}
        self._blocks: list[tuple[str, Any]] = []
        self._log = log.get(source=SOURCE)
        self._failing = Failing(self._log)
        self._cper: CperReader | None = None

    # -- bootstrap -----------------------------------------------------------

    def bootstrap(self) -> dict[str, Any]:
        """Load the library, enumerate GPUs, read identity, start the event reader."""
        api = self.api = AmdBinding(load_amdsmi())
        self._names = api.status_names
        if api.lacking:
            self._log.warning(
                "the amdsmi package lacks functions or types; their fields are omitted",
                missing=api.lacking,
            )
        self._blocks = [
            (b.name.lower(), b) for b in api.AmdSmiGpuBlock if b.name not in ("INVALID", "RESERVED")
        ]
        try:
            api.amdsmi_init(api.AmdSmiInitFlags.INIT_AMD_GPUS)
        except api.AmdSmiLibraryException as exc:
            status = status_name(self._names, int(exc.get_error_code()))
            if status in NO_DRIVER:
                raise BackendUnavailable(
                    status, f"amdsmi_init: {status} (is the amdgpu driver loaded?)"
                ) from None
            missing = self._missing_driver_files()
            if missing:
                # amdsmi reports DRIVER_NOT_LOADED only when it could ask the driver;
                # without amdgpu, init fails with whatever rocm_smi said (INIT_ERROR,
                # ...): on a node without AMD GPUs that is "not here", not a fault.
                raise BackendUnavailable(
                    "driver_not_loaded",
                    f"amdsmi_init: {status}, and {' and '.join(missing)} missing"
                    " (is the amdgpu driver loaded, and /dev/kfd passed to the container?)",
                ) from None
            raise BackendError("init_failed", f"amdsmi_init failed: {status}") from None
        self._cper = CperReader(api, int(self.config.get("cper_per_poll", CPER_PER_POLL)))
        try:
            self._enumerate()
        except BackendError:
            with contextlib.suppress(api.AmdSmiException):
                api.amdsmi_shut_down()
            raise
        if self.config.get("events", True):
            self.events = EventWatcher(
                api,
                [Watched(g.handle, i, g.device) for i, g in enumerate(self.gpus)],
                # An explicit empty list means "none": only a missing key means defaults.
                self.config.get("event_types", AMD_HEALTH_EVENTS),
                SOURCE,
            )
            self.events.start()
        self._log.info("amdsmi ready", devices=len(self.gpus), version=self._lib_version())
        return {
            "vendor": "amd",
            "devices": [
                {
                    "device": g.device,
                    "uuid": g.uuid,
                    "info": g.info,
                    "index": int(g.device),
                    "parent": g.parent or g.info.get("pci_bus_id") or g.uuid,
                }
                for g in self.gpus
            ],
        }

    def _missing_driver_files(self) -> list[str]:
        """The amdgpu driver's marks that are absent: its module in sysfs, /dev/kfd."""
        sys_path = Path(self.config.get("sys_path") or "/sys")
        dev_path = Path(self.config.get("dev_path") or "/dev")
        marks = (sys_path / "module" / "amdgpu", dev_path / "kfd")
        return [str(mark) for mark in marks if not mark.exists()]

    def _enumerate(self) -> None:
        api = self.api
        try:
            handles = api.amdsmi_get_processor_handles()
        except api.AmdSmiLibraryException as exc:
            status = status_name(self._names, int(exc.get_error_code()))
            raise BackendError("enumeration_failed", f"listing GPUs failed: {status}") from None
        # The device label is the library's index, so it stays the same when
        # a worker serves only some of them (the others isolated after a hang).
        # Before any device is touched: a hang on one partition isolates its siblings too.
        parents = self._parents(len(handles))
        crumb.topology(parents)
        self.gpus = []
        for index in crumb.wanted(self.config, len(handles)):
            crumb.device(index)
            gpu = self._identify(handles[index], self._addresses.get(index, ""))
            if gpu is not None:
                gpu.device = str(index)
                gpu.parent = parents[index] if parents else ""
                self.gpus.append(gpu)
        crumb.clear()
        self._dedupe_uuids()
        _share_partition_modes(self.gpus)
        isolated = (self.config.get(crumb.ISOLATION_KEY) or {}).get("skip")
        if not self.gpus and not isolated:
            raise BackendUnavailable("no_devices", "amdsmi found no AMD GPU")
        # No GPU served because every one is isolated: an empty worker, not "no AMD
        # here"; the isolated ones stay reported, down with their reason.

    def _parents(self, count: int) -> list[str]:
        """The physical GPU of each of the ``count`` processors, in the library's order.

        From amdsmi's sockets, which the library lists from what it learnt at
        init, without asking a device: each socket's processors (its partitions,
        when the GPU is partitioned) and its id, the PCI address (whose function
        number, which tells partitions apart, is dropped). [] when the library
        does not say (each device is then its own).
        """
        api = self.api
        keys: list[str] = []
        # The PCI address of each processor alone on its socket (an unpartitioned GPU):
        # what the library learnt at init, so a GPU lost before it could be asked
        # still names its address (its DRA device, its rules; see _identify).
        self._addresses = {}
        try:
            for n, socket in enumerate(api.amdsmi_get_socket_handles()):
                size = ctypes.c_uint32(0)
                status = api.amdsmi_wrapper.amdsmi_get_processor_handles(
                    socket, ctypes.byref(size), None
                )
                if status:
                    return []
                try:
                    name = _text(api.amdsmi_get_socket_info(socket))
                except api.AmdSmiLibraryException:
                    name = ""
                if size.value == 1 and _is_bdf(name):
                    self._addresses[len(keys)] = name.strip().lower()
                keys += [crumb.physical_key(name) if name else f"socket-{n}"] * size.value
        except (api.AmdSmiLibraryException, ctypes.ArgumentError, AttributeError) as exc:
            self._log.info("no socket layout; each device isolated on its own", error=repr(exc))
            self._addresses = {}
            return []
        if len(keys) != count:
            self._addresses = {}
            return []
        return keys

    def _lib_version(self) -> str:
        try:
            v = self.api.amdsmi_get_lib_version()
            return f"{v['major']}.{v['minor']}.{v['release']}"
        except Exception:  # informational only
            return "unknown"

    def _is_gpu(self, type_name: Any) -> bool:
        """False only for a processor amdsmi positively names as something else."""
        try:
            value = int(self.api.AmdSmiProcessorType[str(type_name)])
        except KeyError:
            return True  # INIT_AMD_GPUS enumerates GPUs only; an unknown name is one
        return value == int(self.api.amdsmi_wrapper.AMDSMI_PROCESSOR_TYPE_AMD_GPU)

    def _identify(self, handle: Any, address: str = "") -> Gpu | None:
        """Identity of one handle; None when it is not a GPU.

        ``address`` is its PCI address as the socket layout names it ("" when the
        layout does not say): all a GPU lost before its identity was read keeps.
        """
        api = self.api
        r = DeviceReader(api, handle, -1)
        try:
            kind = r.call("processor_type", api.amdsmi_get_processor_type)
            if kind is not None and not self._is_gpu(kind.get("processor_type")):
                return None
            bdf = _text(r.call("bdf", api.amdsmi_get_gpu_device_bdf))
            crumb.identity(f"pci_bus_id={bdf}")
            uuid = _text(r.call("uuid", api.amdsmi_get_gpu_device_uuid))
            crumb.identity(f"pci_bus_id={bdf};uuid={uuid}")
            asic = r.call("asic_info", api.amdsmi_get_gpu_asic_info) or {}
            board = r.call("board_info", api.amdsmi_get_gpu_board_info) or {}
            vbios = r.call("vbios_info", api.amdsmi_get_gpu_vbios_info) or {}
            driver = r.call("driver_info", api.amdsmi_get_gpu_driver_info) or {}
            compute = _text(r.call("compute_partition", api.amdsmi_get_gpu_compute_partition))
            memory = _text(r.call("memory_partition", api.amdsmi_get_gpu_memory_partition))
            kfd = r.call("kfd_info", api.amdsmi_get_gpu_kfd_info) or {}
            if compute.upper() in UNPARTITIONED:
                # Only a GPU's first partition reports its mode; the others (and a
                # container's one partition) say how many partitions their GPU has.
                metrics = r.call("gpu_metrics", api.amdsmi_get_gpu_metrics_info) or {}
                count = metrics.get("num_partition")
                if isinstance(count, int) and count > 1:
                    compute = MODES.get(count, compute)
        except DeviceGone as exc:
            # Keep a lost GPU in the inventory, so it is reported down by name.
            self._log.warning("device lost during enumeration", status=exc.detail, address=address)
            # Its address from the socket layout still says which PCI function (and
            # so which DRA device) it is, while its uuid stays a placeholder.
            return Gpu(handle, "", "", {"pci_bus_id": address} if address else {}, identified=False)
        info = {
            "model": _text(asic.get("market_name")) or _text(board.get("product_name")),
            "pci_bus_id": bdf,
            "serial": _text(board.get("product_serial")) or _text(asic.get("asic_serial")),
            "vbios": _text(vbios.get("version")) or _text(vbios.get("part_number")),
            "driver_version": _text(driver.get("driver_version")),
            "compute_partition": compute,
            "memory_partition": memory,
        }
        partition = kfd.get("current_partition_id")
        partitioned = compute.upper() not in UNPARTITIONED
        if partitioned and isinstance(partition, int):
            # Which partition of which GPU: amdsmi numbers a GPU's partitions by PCI function.
            info["partition"] = str(partition)
            info["physical_gpu"] = bdf.rsplit(".", 1)[0] + ".0" if bdf else ""
        # Without a UUID the PCI address is the next most stable identity.
        return Gpu(
            handle,
            "",
            uuid or (f"pci-{bdf}" if bdf else ""),
            info,
            partitioned=partitioned,
            xcp=partition if isinstance(partition, int) and partitioned else None,
            part_number=_text(board.get("model_number")),
        )

    def _dedupe_uuids(self) -> None:
        uuids = unique_uuids([(g.device, g.uuid) for g in self.gpus], "amd-gpu-")
        for gpu, uuid in zip(self.gpus, uuids, strict=True):
            if gpu.uuid and uuid != gpu.uuid:
                self._log.warning("duplicate uuid", device=gpu.device, uuid=gpu.uuid, now=uuid)
            gpu.uuid = uuid

    # -- requests --------------------------------------------------------------

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``."""
        expect_poll(op, SOURCE)
        slow = bool(args.get("slow"))
        processes = bool(args.get("processes"))
        ledgers = self._ledgers(args.get("ledger"))
        if slow:
            self._identify_again()
        ledger_out: dict[str, Any] = {}

        def read(gpu: Gpu, position: int, rows: Rows, slow_rows: Rows | None) -> None:
            r = DeviceReader(self.api, gpu.handle, position, rows, prefixes=gpu.prefixes)
            r.partitioned, r.xcp = gpu.partitioned, gpu.xcp
            slow_r = (
                None
                if slow_rows is None
                else DeviceReader(self.api, gpu.handle, position, slow_rows, prefixes=gpu.prefixes)
            )
            cper = (ledgers.get(gpu.uuid, Ledger()), ledger_out) if gpu.primary else None
            self._read(gpu, r, slow_r, processes, cper)

        reply = poll_devices(self.gpus, slow, read, self._log, SOURCE)
        if self.events is not None and args.get("events", True):
            merge(reply["readings"], self.events.readings())
        reply["ledger"] = ledger_out
        return reply

    def _ledgers(self, raw: Any) -> dict[str, Ledger]:
        """The daemon's CPER ledgers by uuid; a malformed one is a protocol error."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise BackendError("bad_request", "poll args: ledger must be an object")
        try:
            return {str(uuid): Ledger.from_wire(item) for uuid, item in raw.items()}
        except LedgerError as exc:
            raise BackendError("bad_request", f"poll args: ledger: {exc}") from None

    def _read_cper(self, gpu: Gpu, r: DeviceReader, ledger: Ledger, out: dict[str, Any]) -> None:
        """New CPER records into the ledger (returned to the daemon) and its readings."""
        if self._cper is None or not self._cper.offered:
            return
        ledger = self._cper.read(r, ledger)
        out[gpu.uuid] = ledger.to_wire()
        export_ledger(r, ledger, self._cper.decodes_corrected)

    def _identify_again(self) -> None:
        """InventoryChanged when a device lost during enumeration can be identified now.

        It is listed under a placeholder uuid without info labels; a new worker
        enumerates it with its real identity.
        """
        for gpu in self.gpus:
            if gpu.identified:
                continue
            crumb.device(int(gpu.device))
            found = self._identify(gpu.handle)
            if found is not None and found.identified:
                raise InventoryChanged(f"GPU {gpu.device} answers again, as {found.uuid}")

    def _read(
        self,
        gpu: Gpu,
        r: DeviceReader,
        slow_r: DeviceReader | None,
        processes: bool,
        cper: tuple[Ledger, dict[str, Any]] | None,
    ) -> None:
        """Read one device into the reply's rows; DeviceGone when it is down.

        ``cper``: the GPU's ledger from the daemon and where to put the advanced
        one (None for a partition other than the first).
        """
        try:
            for read in FAST:
                read(r)
            if processes:
                read_processes(r)
            if cper is not None:
                self._read_cper(gpu, r, *cper)
            if slow_r is not None:
                read_ecc(slow_r, self._blocks)
                read_partition(slow_r)
                if gpu.part_number:
                    slow_r.add(ACCEL_AMD_BOARD_INFO, 1, gpu.part_number)
                read_limits(slow_r)
                read_domains(slow_r)
                if gpu.primary:
                    read_bad_pages(slow_r)
        except DeviceGone as exc:
            self._failing.note(gpu, "device", exc.detail)
            raise
        readers = (r,) if slow_r is None else (r, slow_r)
        self._note_failures(gpu, *readers)
        reason = r.down_reason()
        if reason:
            raise DeviceGone(reason, "every call failed")
        for why, n in r.errors.items():
            if n:
                count(gpu.errors, why, n)

    def _note_failures(self, gpu: Gpu, *readers: DeviceReader) -> None:
        failing: dict[str, str] = {}
        for reader in readers:
            for f in reader.failures:
                failing.setdefault(f.field, f.detail or f.reason)
        for name, why in failing.items():
            self._failing.note(gpu, name, why)
        self._failing.recovered(gpu, failing)

    def close(self) -> None:
        """Stop the event thread and shut the library down."""
        if self.events is not None:
            self.events.stop()
            self.events = None
        if self.api is not None:
            # Failing to shut down leaves nothing behind: the process exits next.
            with contextlib.suppress(self.api.AmdSmiException):
                self.api.amdsmi_shut_down()
            self.api = None
