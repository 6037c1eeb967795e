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

Poll reply: ``{"processes": [{"pid": int, "state": str, "restore_tid": int|None}],
"errors": {reason: count}, "queried": int}``.
"""

from __future__ import annotations

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


def _code(result: Any) -> int:
    return int(result)


class CudaCheckpointBackend:
    """The worker side: cuInit once, then state queries per candidate pid."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.reader = ProcReader(str(config.get("proc_path") or "/proc"))
        self.driver: Any = None
        self.version = 0

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

    def _candidates(self, pids: list[int], scan_maps: bool) -> list[int]:
        found = set(pids)
        if scan_maps:
            for pid in self.reader.pids():
                if pid not in found and self.reader.maps_mention(pid, LIBCUDA):
                    found.add(pid)
        return sorted(p for p in found if p > 0 and self.reader.is_process(p))

    def _state(self, pid: int) -> tuple[str | None, int | None, str]:
        """(state, restore thread id, error reason) of one pid; state None when not CUDA."""
        try:
            status, state = self.driver.cuCheckpointProcessGetState(pid)
        except RuntimeError as exc:  # FunctionNotFoundError: the driver lacks the entry point
            raise BackendError("function_not_found", str(exc)) from None
        code = _code(status)
        if code == _NOT_FOUND:
            return None, None, ""
        if code != 0:
            name = getattr(status, "name", str(code))
            return None, None, name.removeprefix("CUDA_ERROR_").lower()
        index = int(state)
        if not 0 <= index < len(CHECKPOINT_STATES):
            return None, None, "unknown_state"
        tid: int | None = None
        status, value = self.driver.cuCheckpointProcessGetRestoreThreadId(pid)
        if _code(status) == 0 and value is not None:
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
        candidates = self._candidates(raw, bool(args.get("scan_maps")))
        for pid in candidates:
            state, tid, error = self._state(pid)
            if error:
                errors[error] = errors.get(error, 0) + 1
            elif state is not None:
                processes.append({"pid": pid, "state": state, "restore_tid": tid})
        return {"processes": processes, "errors": errors, "queried": len(candidates)}

    def close(self) -> None:
        """Nothing to release: cuInit holds no context."""
