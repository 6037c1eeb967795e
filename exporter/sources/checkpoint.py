"""CUDA checkpoint state of GPU processes (``sources.cuda_checkpoint``, off by default).

The driver calls run in a worker process (``exporter.backends.cuda_checkpoint``)
like any vendor library, so a hung driver is killed, not waited for. Candidate
PIDs are the GPU processes the device sources last reported, the CUDA
processes seen in earlier polls (a checkpointed process leaves the device
process list), and, in the worker, every process that maps libcuda.

Exports ``accel_process_checkpoint_state{uuid,pid,state}`` one-hot over the six
driver states; ``uuid`` is the device the process was last seen on (empty when
it was never seen on one). Restore thread IDs are shown in ``/status``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from exporter.catalog.workload import CHECKPOINT_STATES
from exporter.config.host import CudaCheckpointSourceConfig
from exporter.enrich.devices import PROCESS_FAMILIES
from exporter.errors import SourceUnavailable, WorkerError
from exporter.family_names import (
    ACCEL_PROCESS_CHECKPOINT_QUERY_ERRORS_TOTAL,
    ACCEL_PROCESS_CHECKPOINT_STATE,
)
from exporter.model import Reading
from exporter.sources.base import StoreReader
from exporter.sources.worker import WorkerSource

BACKEND = "exporter.backends.cuda_checkpoint:CudaCheckpointBackend"
# Share of the poll deadline given to the worker call, so the runner's own
# deadline (which kills the worker with reason "timeout") fires first.
CALL_SHARE = 0.85


class CheckpointSource(WorkerSource):
    """Polls the checkpoint-state worker for every candidate process."""

    def __init__(
        self,
        name: str,
        config: CudaCheckpointSourceConfig,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            name,
            config,
            BACKEND,
            {"proc_path": config.proc_path},
            bootstrap_timeout=config.bootstrap_timeout,
            env=env,
        )
        self.checkpoint = config
        self._store: StoreReader | None = None
        # pid -> the devices it was last seen on; kept while the driver knows the pid.
        self._devices: dict[int, tuple[str, ...]] = {}
        self._restore_tids: dict[int, int | None] = {}
        self._errors: Counter[str] = Counter()
        self._queried = 0

    def attach(self, store: StoreReader) -> None:
        """Keep the store to read the GPU processes from."""
        self._store = store

    def status(self) -> dict[str, Any]:
        """Worker state, driver version, candidates and restore thread IDs."""
        return {
            **super().status(),
            "driver_version": self.runner.state.inventory.get("driver_version"),
            "candidates_queried": self._queried,
            "restore_thread_ids": {str(pid): tid for pid, tid in self._restore_tids.items()},
        }

    def _gpu_processes(self) -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        if self._store is None:
            return out
        view = self._store.view()
        for reading in (r for name in PROCESS_FAMILIES for r in view.readings(name)):
            _, uuid, pid = reading.labels[:3]
            if pid.isdigit():
                out.setdefault(int(pid), set()).add(uuid)
        return out

    async def poll(self) -> Sequence[Reading]:
        """Ask the worker about every candidate and export the one-hot states."""
        deadline = time.monotonic() + self.timeout * CALL_SHARE
        await self.runner.ready(timeout=max(0.0, deadline - time.monotonic()))
        on_gpu = self._gpu_processes()
        for pid, uuids in on_gpu.items():
            self._devices[pid] = tuple(sorted(uuids))
        candidates = sorted(set(on_gpu) | set(self._devices))
        reply = await self.runner.call(
            "poll",
            {"pids": candidates, "scan_maps": self.checkpoint.scan_maps},
            timeout=max(0.05, deadline - time.monotonic()),
        )
        try:
            processes, errors, queried = _parse_reply(reply)
        except ValueError as exc:
            await self.runner.invalidate("protocol_error", str(exc))
            raise WorkerError("protocol_error", str(exc)) from None
        self._errors.update(errors)
        self._queried = queried
        states = {pid: state for pid, state, _ in processes}
        self._restore_tids = {pid: tid for pid, _, tid in processes}
        # Forget processes the driver no longer knows (they ended); remember new ones.
        self._devices = {p: self._devices.get(p, ("",)) for p in states}
        readings: list[Reading] = []
        for pid, state in sorted(states.items()):
            for uuid in self._devices.get(pid, ("",)):
                readings.extend(
                    Reading(
                        ACCEL_PROCESS_CHECKPOINT_STATE,
                        (uuid, str(pid), name),
                        1.0 if name == state else 0.0,
                    )
                    for name in CHECKPOINT_STATES
                )
        readings.extend(
            Reading(ACCEL_PROCESS_CHECKPOINT_QUERY_ERRORS_TOTAL, (reason,), float(count))
            for reason, count in sorted(self._errors.items())
        )
        denied = errors.get("not_permitted", 0)
        if denied and denied == queried and not processes:
            raise SourceUnavailable(
                "not_permitted",
                f"the driver refused all {denied} state queries (run as root, with hostPID,"
                " and CAP_SYS_PTRACE for other users' processes)",
                readings,
            )
        return readings


def _parse_reply(reply: Any) -> tuple[list[tuple[int, str, int | None]], dict[str, int], int]:
    """Validate the worker's answer; ValueError naming the first problem."""
    if not isinstance(reply, dict):
        raise ValueError("poll reply is not an object")
    raw, errors, queried = reply.get("processes"), reply.get("errors"), reply.get("queried")
    if not isinstance(raw, list) or not isinstance(errors, dict) or not isinstance(queried, int):
        raise ValueError("poll reply needs processes, errors and queried")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValueError(f"processes[{i}] is not an object")
        pid, state, tid = item.get("pid"), item.get("state"), item.get("restore_tid")
        if not isinstance(pid, int) or state not in CHECKPOINT_STATES:
            raise ValueError(f"processes[{i}] needs an integer pid and a known state")
        if tid is not None and not isinstance(tid, int):
            raise ValueError(f"processes[{i}] restore_tid is not an integer")
        out.append((pid, str(state), tid))
    if not all(isinstance(k, str) and isinstance(v, int) for k, v in errors.items()):
        raise ValueError("errors must map reasons to counts")
    return out, {str(k): int(v) for k, v in errors.items()}, queried
