"""CUDA checkpoint state through the real cuda-bindings, a worker, and a fake libcuda.so.1."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from exporter.catalog.workload import CHECKPOINT_STATES
from exporter.config.host import CudaCheckpointSourceConfig
from exporter.errors import SourcePending, SourceUnavailable, WorkerError
from exporter.sources.checkpoint import CheckpointSource
from exporter.store import Store
from tests.helpers.cli import WITHOUT_RICH
from tests.helpers.devices import process, snapshot
from tests.helpers.fakeproc import FakeProc

REPO = Path(__file__).resolve().parents[2]
G0 = "GPU-00000000-1111-2222-3333-444444444444"
LIBCUDA_MAP = "7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.570.86.10\n"


class Fake:
    def __init__(self, tmp_path: Path, lib_dir: Path) -> None:
        self.state = tmp_path / "cuda-state"
        self.calls = tmp_path / "cuda-calls"
        self.proc = FakeProc(tmp_path / "proc")
        self.lib_dir = lib_dir
        self.write("driver_version 12080")

    def write(self, *lines: str) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.state)

    def env(self, lib: bool = True) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = f"{REPO}:{WITHOUT_RICH}"
        env["LD_LIBRARY_PATH"] = str(self.lib_dir) if lib else ""
        env["FAKE_CUDA_STATE"] = str(self.state)
        env["FAKE_CUDA_CALL_LOG"] = str(self.calls)
        return env

    def called(self) -> set[str]:
        if not self.calls.exists():
            return set()
        return {line.split()[0] for line in self.calls.read_text().splitlines()}


@pytest.fixture
def fake(tmp_path, fake_libcuda_dir):
    return Fake(tmp_path, fake_libcuda_dir)


def run_source(fake, polls=1, lib=True, store=None, between=None):
    cfg = CudaCheckpointSourceConfig(
        enabled=True,
        interval=1.0,
        timeout=10.0,
        proc_path=str(fake.proc.root),
        bootstrap_timeout=20.0,
    )
    source = CheckpointSource("cuda_checkpoint", cfg, env=fake.env(lib))
    if store is not None:
        source.attach(store)
    results = []

    async def go():
        await source.start()
        try:
            await source.wait_ready(30)
            for i in range(polls):
                if between is not None and i:
                    between(i)
                try:
                    results.append(await source.poll())
                except Exception as exc:  # the test inspects it
                    results.append(exc)
            return source.status()
        finally:
            await source.close()

    status = asyncio.run(go())
    return results, status


def one_hot(readings):
    out = {}
    for r in readings:
        if r.metric == "accel_process_checkpoint_state" and r.value == 1.0:
            out[(r.labels[0], r.labels[1])] = r.labels[2]
    return out


def test_states_from_gpu_processes_and_libcuda_maps(fake):
    fake.proc.add(4001)  # on the GPU per the device source
    fake.proc.add(4002, maps=LIBCUDA_MAP)  # checkpointed: only found through its maps
    fake.proc.add(4003, maps="7f00-7f10 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")  # not CUDA
    fake.proc.add(4004, tgid=4001, maps=LIBCUDA_MAP)  # a thread of 4001: never queried
    fake.write("driver_version 12080", "pid 4001 0 0", "pid 4002 2 4242", "pid 4004 1")
    store = Store()
    store.put(snapshot("nvml", [process("0", G0, 4001)]))
    (readings,), status = run_source(fake, store=store)
    assert one_hot(readings) == {(G0, "4001"): "running", ("", "4002"): "checkpointed"}
    series = [r for r in readings if r.metric == "accel_process_checkpoint_state"]
    assert len(series) == 2 * len(CHECKPOINT_STATES)
    assert status["restore_thread_ids"] == {"4001": 0, "4002": 4242}
    assert status["driver_version"] == 12080
    # Read-only: nothing but the two queries reached the driver.
    assert fake.called() == {
        "cuCheckpointProcessGetState",
        "cuCheckpointProcessGetRestoreThreadId",
    }
    queried = {int(line.split()[1]) for line in fake.calls.read_text().splitlines()}
    assert queried == {4001, 4002}  # 4003 maps no libcuda, 4004 is a thread


def test_every_state_name(fake):
    for i in range(len(CHECKPOINT_STATES)):
        fake.proc.add(5000 + i, maps=LIBCUDA_MAP)
    fake.write("driver_version 12080", *[f"pid {5000 + i} {i}" for i in range(6)])
    (readings,), _ = run_source(fake)
    assert one_hot(readings) == {("", str(5000 + i)): s for i, s in enumerate(CHECKPOINT_STATES)}


def test_a_state_the_bindings_cannot_name_is_that_pids_error_not_a_failed_poll(fake):
    # cuda-bindings turns the state into CUprocessState: 7 raises ValueError there.
    fake.proc.add(5100, maps=LIBCUDA_MAP)
    fake.proc.add(5101, maps=LIBCUDA_MAP)
    fake.write("driver_version 12080", "pid 5100 7", "pid 5101 2 77")
    (readings,), status = run_source(fake)
    assert not isinstance(readings, Exception), readings
    assert one_hot(readings) == {("", "5101"): "checkpointed"}
    errors = {r.labels: r.value for r in readings if r.metric.endswith("errors_total")}
    assert errors == {("unknown_state",): 1.0}
    assert status["restore_thread_ids"] == {"5101": 77}


def test_libcuda_without_cuda_state_is_not_an_error(fake):
    # A process that maps libcuda but never initialised CUDA: the driver answers
    # NOT_INITIALIZED or INVALID_VALUE. Found only through its maps, it is no error;
    # a process the device sources report on a GPU still counts the failure.
    fake.proc.add(5200, maps=LIBCUDA_MAP)
    fake.proc.add(5201, maps=LIBCUDA_MAP)
    fake.proc.add(5202)
    fake.write("driver_version 12080", "error 5200 3", "error 5201 1", "error 5202 3")
    store = Store()
    store.put(snapshot("nvml", [process("0", G0, 5202)]))
    (readings,), status = run_source(fake, store=store)
    assert one_hot(readings) == {}
    errors = {r.labels: r.value for r in readings if r.metric.endswith("errors_total")}
    assert errors == {("not_initialized",): 1.0}
    assert status["candidates_queried"] == 3


def test_process_seen_on_a_gpu_keeps_its_uuid_after_leaving_the_list(fake):
    fake.proc.add(4100)
    fake.write("driver_version 12080", "pid 4100 0")
    store = Store()
    store.put(snapshot("nvml", [process("0", G0, 4100)]))

    def checkpointed(_):
        fake.write("driver_version 12080", "pid 4100 2")
        store.put(snapshot("nvml", []))  # it released the GPU

    results, _ = run_source(fake, polls=2, store=store, between=checkpointed)
    assert one_hot(results[0]) == {(G0, "4100"): "running"}
    assert one_hot(results[1]) == {(G0, "4100"): "checkpointed"}


@pytest.mark.parametrize(
    ("state_lines", "lib", "reason"),
    [
        (["driver_version 12040"], True, "driver_too_old"),
        (["driver_version 12080", "init_error 100"], True, "no_device"),
        (["driver_version 12080"], False, "library_not_found"),
    ],
)
def test_unavailable_with_reason(fake, state_lines, lib, reason):
    fake.write(*state_lines)
    (result,), status = run_source(fake, lib=lib)
    assert isinstance(result, SourceUnavailable)
    assert result.reason == reason
    assert status["worker_state"] == "unavailable"
    assert not fake.called() & {"cuCheckpointProcessGetState"}


def test_permission(fake):
    fake.proc.add(4200, maps=LIBCUDA_MAP)
    fake.proc.add(4201, maps=LIBCUDA_MAP)
    fake.write("driver_version 12080", "pid 4200 0", "pid 4201 0", "deny 4201")
    (readings,), _ = run_source(fake)
    assert one_hot(readings) == {("", "4200"): "running"}
    errors = {r.labels: r.value for r in readings if r.metric.endswith("errors_total")}
    assert errors == {("not_permitted",): 1.0}
    # Refused for every process: the source is unavailable with the reason.
    fake.write("driver_version 12080", "pid 4200 0", "pid 4201 0", "deny 4200", "deny 4201")
    (result,), _ = run_source(fake)
    assert isinstance(result, SourceUnavailable) and result.reason == "not_permitted"


def test_hung_driver_call_kills_the_worker_and_recovers(fake):
    fake.proc.add(4300, maps=LIBCUDA_MAP)
    fake.write("driver_version 12080", "pid 4300 0", "hang 4300 30000")
    cfg = CudaCheckpointSourceConfig(
        enabled=True, interval=1.0, timeout=1.5, proc_path=str(fake.proc.root)
    )
    source = CheckpointSource("cuda_checkpoint", cfg, env=fake.env())

    async def go():
        await source.start()
        try:
            await source.wait_ready(30)
            with pytest.raises(WorkerError) as hung:
                await source.poll()
            fake.write("driver_version 12080", "pid 4300 1")
            # The worker was killed; polls fail (the worker down) or are pending (the new
            # one still starting) until the respawned one is ready.
            for _ in range(100):
                try:
                    return hung.value, await source.poll(), source.restarts
                except (WorkerError, SourcePending):
                    await asyncio.sleep(0.2)
            raise AssertionError("the worker never came back")
        finally:
            await source.close()

    hung, readings, restarts = asyncio.run(go())
    assert hung.reason == "timeout"
    assert one_hot(readings) == {("", "4300"): "locked"}
    assert restarts == 1
