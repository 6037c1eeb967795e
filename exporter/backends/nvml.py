"""NVIDIA GPUs through nvidia-ml-py (``pynvml``), run inside a worker process.

``bootstrap()`` loads libnvidia-ml.so.1, enumerates the GPUs and returns the
inventory :class:`~exporter.sources.device.DeviceSource` expects; a missing
binding, library or driver is :class:`BackendUnavailable` with the reason.
``handle("poll", {"slow", "processes", "events"})`` reads every GPU: a GPU that
is lost (GPU_IS_LOST) or answers nothing is reported down with a reason while
the others are read as usual. XID and other events are tallied by a background
thread and forwarded on each poll.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.wire import Rows, merge
from exporter.backends import nvml_gpm
from exporter.backends import nvml_support as nv
from exporter.backends.base import (
    BackendError,
    BackendUnavailable,
    InventoryChanged,
    unique_uuids,
)
from exporter.backends.binding import Binding
from exporter.backends.contract import DeviceGone, Emitter, Failing, poll_devices
from exporter.backends.nvml_device import DeviceReader
from exporter.backends.nvml_events import EventWatcher
from exporter.backends.nvml_gpu import Gpu

SOURCE = "nvml"
# uuid placeholder of a GPU that failed to identify itself at bootstrap, + index.
UNIDENTIFIED = "unidentified-"

_UNAVAILABLE = {
    nv.LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 could not be loaded (is the NVIDIA driver installed?)",
    nv.DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
}


def _load() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise BackendUnavailable(
            "binding_missing",
            "nvidia-ml-py is not installed "
            f"(accel-exporter's 'nvidia' extra, docs/deploy.md): {exc}",
        ) from None
    return pynvml


def bind(pynvml: Any) -> Binding:
    """The pynvml module with every function the backend calls.

    A function this release lacks fails like a driver without the symbol
    (FUNCTION_NOT_FOUND), so its field is absent and older entry points are used.
    """

    def absent(name: str) -> Callable[..., Any]:
        def call(*_args: Any, **_kwargs: Any) -> Any:
            raise pynvml.NVMLError(nv.FUNCTION_NOT_FOUND)

        call.__name__ = name
        return call

    return Binding(pynvml, nv.FUNCTIONS, absent)


class NvmlBackend:
    """The ``nvml`` device backend (see the module docstring)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.nvml: Any = None
        self.gpus: list[Gpu] = []
        self.reader: DeviceReader | None = None
        self.events: EventWatcher | None = None
        self._log = log.get(source=SOURCE)
        # The failing calls of every GPU, each logged once per change of reason.
        self._failing = Failing(self._log)

    # -- bootstrap -------------------------------------------------------------

    def bootstrap(self) -> dict[str, Any]:
        """Initialise NVML and describe every GPU it enumerates."""
        n = self.nvml = bind(_load())
        if n.missing:
            self._log.warning(
                "nvidia-ml-py lacks functions; their fields are omitted", missing=n.missing
            )
        try:
            n.nvmlInit()
        except n.NVMLError as exc:
            code = int(exc.value)
            if code in _UNAVAILABLE:
                raise BackendUnavailable(nv.reason_of(code), _UNAVAILABLE[code]) from None
            raise BackendError(nv.reason_of(code), f"nvmlInit failed: {exc}") from None
        driver = self._system(n.nvmlSystemGetDriverVersion)
        cuda = self._system(n.nvmlSystemGetCudaDriverVersion_v2)
        try:
            count = int(n.nvmlDeviceGetCount())
        except n.NVMLError as exc:
            raise BackendError(
                nv.reason_of(int(exc.value)), f"nvmlDeviceGetCount failed: {exc}"
            ) from None
        driver_text = info_text(driver)
        cuda_text = nv.cuda_version(int(cuda)) if cuda is not None else ""
        infos = []
        # Only the GPUs this worker serves: a GPU isolated after a hang is left to
        # its own probe (see exporter.workers.runner).
        for index in crumb.wanted(self.config, count):
            crumb.device(index)
            gpu, info = self._describe(index)
            info["driver_version"] = driver_text
            info["cuda_driver_version"] = cuda_text
            self.gpus.append(gpu)
            infos.append(info)
        crumb.clear()
        uuids = unique_uuids([(g.device, g.uuid) for g in self.gpus], UNIDENTIFIED)
        for gpu, uuid in zip(self.gpus, uuids, strict=True):
            if uuid != gpu.uuid:
                self._log.warning("duplicate uuid", device=gpu.index, uuid=gpu.uuid, now=uuid)
                gpu.uuid = uuid
        devices = [
            # A GPU is its own physical device; its MIG instances are read inside it.
            {
                "device": g.device,
                "uuid": g.uuid,
                "info": info,
                "index": g.index,
                "parent": info.get("pci_bus_id") or g.uuid,
            }
            for g, info in zip(self.gpus, infos, strict=True)
        ]
        self.reader = DeviceReader(n)
        if self.config.get("events", True):
            known = [(i, g.handle) for i, g in enumerate(self.gpus) if g.handle is not None]
            indices = [g.index for g in self.gpus if g.handle is not None]
            watcher = EventWatcher(n, known, indices=indices)
            if watcher.start():
                self.events = watcher
        # Everything loaded so far (pynvml's classes and constants) lives as long as
        # the worker: keep it out of the cyclic collector's full passes, which the
        # polls (allocating only acyclic lists) would otherwise keep triggering.
        gc.freeze()
        self._log.info("nvml ready", devices=len(self.gpus), enumerated=count, driver=driver_text)
        return {"vendor": "nvidia", "devices": devices}

    def _system(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            self._log.warning(
                "system query failed", call=fn.__name__, reason=nv.reason_of(int(exc.value))
            )
            return None

    def _describe(self, index: int) -> tuple[Gpu, dict[str, str]]:
        """A GPU and its info labels (a GPU that cannot be identified gets a placeholder uuid)."""
        n = self.nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
            uuid = nv.text(n.nvmlDeviceGetUUID(handle))
            crumb.identity(f"uuid={uuid}")
        except n.NVMLError as exc:
            # Keep the GPU in the inventory, down with the reason, so a GPU lost
            # before the worker (re)started still shows as missing, not as absent.
            reason = nv.reason_of(int(exc.value))
            self._log.warning("device unidentified", device=index, reason=reason, detail=str(exc))
            return Gpu(index, f"{UNIDENTIFIED}{index}", None, n, unidentified=reason), {}
        gpu = Gpu(index, uuid, handle, n, failing=self._failing)

        def label(fn: Callable[..., Any]) -> str:
            try:
                value = gpu.call(fn, handle)
            except DeviceGone:
                return ""
            return nv.text(value) if value is not None else ""

        pci = None
        try:
            pci = gpu.call(n.nvmlDeviceGetPciInfo, handle)
            if pci is not None:
                crumb.identity(f"uuid={uuid};pci_bus_id={nv.text(pci.busId)}")
            mig = gpu.call(n.nvmlDeviceGetMigMode, handle)
        except DeviceGone:
            mig = None
        gpu.mig_mode = nv.mig_mode(mig)
        info = {
            "model": label(n.nvmlDeviceGetName),
            "pci_bus_id": nv.text(pci.busId) if pci is not None else "",
            "serial": label(n.nvmlDeviceGetSerial),
            "vbios": label(n.nvmlDeviceGetVbiosVersion),
            "mig_mode": gpu.mig_mode,
        }
        return gpu, info

    # -- requests --------------------------------------------------------------

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``; anything else is an error."""
        if op != "poll":
            raise BackendError("unknown_op", f"the nvml backend has no operation {op!r}")
        return self.poll(
            slow=bool(args.get("slow")),
            processes=bool(args.get("processes")),
            events=bool(args.get("events", True)),
        )

    def poll(self, *, slow: bool, processes: bool, events: bool) -> dict[str, Any]:
        """Read every GPU once; one lost GPU never costs the others their readings."""
        if slow:
            self._identify_again()

        def read(gpu: Gpu, position: int, rows: Rows, slow_rows: Rows | None) -> None:
            self._poll_gpu(gpu, position, rows, slow_rows, processes)

        reply = poll_devices(self.gpus, slow, read, self._log, SOURCE)
        if events and self.events is not None:
            merge(reply["readings"], self.events.readings())
        return reply

    def _identify_again(self) -> None:
        """InventoryChanged when a GPU unidentified at bootstrap can be identified now.

        It is listed under a placeholder uuid with no handle, so it could only
        ever be reported down; a new worker enumerates it properly.
        """
        n = self.nvml
        for gpu in self.gpus:
            if not gpu.unidentified:
                continue
            crumb.device(gpu.index)
            try:
                uuid = nv.text(n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(gpu.index)))
            except n.NVMLError:
                continue  # still lost: one call per slow poll
            raise InventoryChanged(f"GPU {gpu.index} answers again, as {uuid}")

    def _poll_gpu(
        self, gpu: Gpu, position: int, rows: Rows, slow_rows: Rows | None, processes: bool
    ) -> None:
        """Read one GPU into the reply's rows; DeviceGone when it is down."""
        assert self.reader is not None
        gpu.ok = gpu.failed = 0
        try:
            if gpu.unidentified:
                raise DeviceGone(gpu.unidentified, "not identified when the worker started")
            # Slow first: it learns the NVLink and MIG layout the fast read uses.
            if slow_rows is not None:
                self.reader.slow(gpu, Emitter(position, slow_rows, nv.SENTINELS, gpu.prefixes))
            self.reader.fast(gpu, Emitter(position, rows, nv.SENTINELS, gpu.prefixes), processes)
            if gpu.failed and not gpu.ok:
                # Nothing answered and something failed: as good as down. (Fields
                # merely absent on this GPU say nothing either way.)
                raise DeviceGone(gpu.last_failure, "every call failed")
        except DeviceGone:
            # A GPU found down keeps no GPM sample (the next poll after it returns primes).
            nvml_gpm.free_all(gpu)
            raise

    def close(self) -> None:
        """Stop the event thread, free GPM samples and shut NVML down."""
        if self.events is not None:
            self.events.stop()
            self.events = None
        for gpu in self.gpus:
            nvml_gpm.free_all(gpu)
        if self.nvml is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()


def info_text(value: Any) -> str:
    """Printable text of an optional library string."""
    return nv.text(value) if value is not None else ""
