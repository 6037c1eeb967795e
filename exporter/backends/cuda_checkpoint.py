"""CUDA checkpoint state of processes, read inside a worker through cuda-bindings.

Read-only by construction: the only per-process driver calls made are
``cuCheckpointProcessGetState`` and ``cuCheckpointProcessGetRestoreThreadId``.
Lock, checkpoint, restore and unlock change a process's state and are never
called. The public API appeared with CUDA 12.8 (driver r570); an older driver,
no libcuda, or a cuInit the driver refuses make the backend unavailable with
the reason.

Candidates come from the parent (GPU processes the device sources reported,
plus processes seen before) and, with ``scan_maps``, from every process that
maps libcuda: a checkpointed process has released the GPU and left the device
process list, but keeps the library mapped. Each candidate must be a
thread-group leader: older drivers acted on thread IDs of CUDA processes.

The scan reads ``/proc/<pid>/maps``, which takes each process's mmap lock, so a
process found not to map libcuda is remembered by (pid, start time) and not read
again for :data:`NEGATIVE_TTL_SECONDS` (a process that loads libcuda later and
uses a GPU is found through the device sources meanwhile). A process that maps
libcuda but never initialised CUDA is not a CUDA process: the driver answers
NOT_FOUND, NOT_INITIALIZED or INVALID_VALUE for it, and that is no error.

A state the bindings cannot name (a newer driver's, or cuda-bindings before 12.9
returning an uninitialised value with an error code: NVIDIA/cuda-python#561)
is that pid's ``unknown_state`` error, never a failed poll.

Poll reply: ``{"processes": [{"pid": int, "state": str, "restore_tid": int|None}],
"errors": {reason: count}, "queried": int}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from exporter.backends.base import BackendError, BackendUnavailable
from exporter.catalog.workload import CHECKPOINT_STATES
from exporter.enrich.procfs import ProcReader

MIN_DRIVER_VERSION = 12080
LIBCUDA = b"libcuda.so"
# cuInit results that mean "this machine cannot answer", not "something broke".
_INIT_UNAVAILABLE = {
    100: "no_device",  # CUDA_ERROR_NO_DEVICE
    35: "driver_too_old",  # CUDA_ERROR_INSUFFICIENT_DRIVER
    999: "driver_error",  # CUDA_ERROR_UNKNOWN (e.g. no /dev/nvidiactl in the container)
    800: "not_permitted",  # CUDA_ERROR_NOT_PERMITTED
    304: "os_call_failed",  # CUDA_ERROR_OPERATING_SYSTEM
}
_NOT_FOUND = 500  # not a CUDA process (or gone)
# What the driver answers about a live process that maps libcuda without CUDA state:
# CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_FOUND.
_NOT_CUDA = frozenset({1, 3, _NOT_FOUND})
# How long a process found not to map libcuda is not read again.
NEGATIVE_TTL_SECONDS = 600.0


def _code(result: Any) -> int:
    return int(result)


class CudaCheckpointBackend:
    """The worker side: cuInit once, then state queries per candidate pid."""

    def __init__(self, config: dict[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = ProcReader(str(config.get("proc_path") or "/proc"))
        self.driver: Any = None
        self.version = 0
        self._clock = clock
        # pid -> (start time, when it was found not to map libcuda)
        self._no_libcuda: dict[int, tuple[str, float]] = {}

    def bootstrap(self) -> dict[str, Any]:
        """Load libcuda through cuda-bindings, cuInit, and check the driver version."""
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise BackendUnavailable(
                "cuda_bindings_missing", f"install accel-exporter[cuda] ({exc})"
            ) from None
        try:
            (status,) = driver.cuInit(0)
        except RuntimeError as exc:  # cuda-pathfinder: libcuda.so.1 not found
            raise BackendUnavailable("library_not_found", str(exc)[:300]) from None
        code = _code(status)
        if code != 0:
            reason = _INIT_UNAVAILABLE.get(code)
            detail = f"cuInit failed: {getattr(status, 'name', code)}"
            if reason is not None:
                raise BackendUnavailable(reason, detail)
            raise BackendError("cuinit_failed", detail)
        status, version = driver.cuDriverGetVersion()
        if _code(status) != 0:
            raise BackendError("driver_version_failed", getattr(status, "name", str(status)))
        if version < MIN_DRIVER_VERSION:
            raise BackendUnavailable(
                "driver_too_old",
                f"CUDA driver API {version // 1000}.{version % 1000 // 10} has no checkpoint"
                " state query (needs 12.8, driver r570 or newer)",
            )
        self.driver = driver
        self.version = int(version)
        return {"driver_version": self.version}

    def _maps_libcuda(self, pid: int, now: float) -> bool:
        """Whether ``pid`` maps libcuda, reading its maps only when not known not to."""
        started = self.reader.start_time(pid)
        known = self._no_libcuda.get(pid)
        fresh = known is not None and now - known[1] < NEGATIVE_TTL_SECONDS
        if fresh and started is not None and known is not None and known[0] == started:
            return False
        if self.reader.maps_mention(pid, LIBCUDA):
            self._no_libcuda.pop(pid, None)
            return True
        if started is not None:
            self._no_libcuda[pid] = (started, now)
        return False

    def _candidates(self, pids: list[int], scan_maps: bool) -> tuple[list[int], set[int]]:
        """(every candidate that is a live process, the ones found only through maps)."""
        found = set(pids)
        maps_only: set[int] = set()
        if scan_maps:
            now = self._clock()
            live = set(self.reader.pids())
            # Forget processes that ended, so the cache stays as small as the process table.
            self._no_libcuda = {p: v for p, v in self._no_libcuda.items() if p in live}
            for pid in sorted(live - found):
                if self._maps_libcuda(pid, now):
                    maps_only.add(pid)
        found |= maps_only
        return sorted(p for p in found if p > 0 and self.reader.is_process(p)), maps_only

    def _state(self, pid: int, maps_only: bool) -> tuple[str | None, int | None, str]:
        """(state, restore thread id, error reason) of one pid; state None when not CUDA."""
        try:
            status, state = self.driver.cuCheckpointProcessGetState(pid)
        except ValueError:
            # The bindings could not convert the state to CUprocessState.
            return None, None, "unknown_state"
        except RuntimeError as exc:  # FunctionNotFoundError: the driver lacks the entry point
            raise BackendError("function_not_found", str(exc)) from None
        code = _code(status)
        if code == _NOT_FOUND or (maps_only and code in _NOT_CUDA):
            return None, None, ""
        if code != 0:
            name = getattr(status, "name", str(code))
            return None, None, name.removeprefix("CUDA_ERROR_").lower()
        try:
            index = int(state)
        except (TypeError, ValueError):
            return None, None, "unknown_state"
        if not 0 <= index < len(CHECKPOINT_STATES):
            return None, None, "unknown_state"
        tid: int | None = None
        try:
            status, value = self.driver.cuCheckpointProcessGetRestoreThreadId(pid)
        except ValueError:
            status, value = None, None
        if status is not None and _code(status) == 0 and value is not None:
            tid = int(value)
        return CHECKPOINT_STATES[index], tid, ""

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """``poll {"pids": [...], "scan_maps": bool}`` -> states of the CUDA processes."""
        if op != "poll":
            raise BackendError("unknown_op", f"no operation {op!r}")
        raw = args.get("pids", [])
        if not isinstance(raw, list) or not all(isinstance(p, int) for p in raw):
            raise BackendError("bad_request", "pids must be a list of integers")
        processes: list[dict[str, Any]] = []
        errors: dict[str, int] = {}
        candidates, maps_only = self._candidates(raw, bool(args.get("scan_maps")))
        for pid in candidates:
            state, tid, error = self._state(pid, pid in maps_only)
            if error:
                errors[error] = errors.get(error, 0) + 1
            elif state is not None:
                processes.append({"pid": pid, "state": state, "restore_tid": tid})
        return {"processes": processes, "errors": errors, "queried": len(candidates)}

    def close(self) -> None:
        """Nothing to release: cuInit holds no context."""
