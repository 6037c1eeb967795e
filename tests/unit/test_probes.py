"""The prober drives a probe's runner through its public probe API only (attempt, served,
call, discard) and hands answering devices back (take_back): one probe per physical device,
its logical devices released together, failed probes counted on each. The runner here is
a stand-in of our own class's public API (the real one is exercised end to end in
tests/e2e/test_physical_isolation.py); no vendor binding is involved."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from exporter import log
from exporter.errors import WorkerError
from exporter.workers import isolation as isolation_mod
from exporter.workers.isolation import Fault, Isolation, Probe
from exporter.workers.probes import Prober
from exporter.workers.stuck import StuckProcesses


class ProbeRunner:
    """Answers as a probe's WorkerRunner would: ready or not, serving some indices."""

    def __init__(self, indices: list[int], *, ready: bool, serves: list[int] | None) -> None:
        self.indices = indices
        self.ready = ready
        self.serves = indices if serves is None else serves
        self.asked: list[str] = []
        self.discarded = False

    async def attempt(self) -> bool:
        return self.ready

    def served(self) -> list[object]:
        return list(self.serves)

    async def call(self, op: str, args: Any, timeout: float) -> Any:
        self.asked.append(op)
        return {}

    async def discard(self) -> list[Any]:
        self.discarded = True
        return []


class Harness:
    def __init__(
        self,
        *,
        ready: list[bool],
        serves: list[int] | None = None,
        runner: type[ProbeRunner] = ProbeRunner,
    ) -> None:
        self.runner = runner
        self.log = log.get(source="test")
        self.isolation = Isolation(self.log)
        self.stuck = StuckProcesses(self.log)
        self.ready = list(ready)
        self.serves = serves
        self.spawned: list[ProbeRunner] = []
        self.taken: list[list[int]] = []
        self.prober = Prober(
            "test",
            self.isolation,
            self.stuck,
            spawn=self.spawn,  # type: ignore[arg-type]
            take_back=self.take_back,
            log=self.log,
        )
        self.prober.request = Probe("poll", {}, timeout=1.0)

    def spawn(self, indices: list[int]) -> ProbeRunner:
        runner = self.runner(indices, ready=self.ready.pop(0), serves=self.serves)
        self.spawned.append(runner)
        return runner

    async def take_back(self, members: list[Fault]) -> None:
        self.taken.append([m.index for m in members])
        self.isolation.release(members)

    def isolate(self, *indices: int, parent: str) -> list[Fault]:
        faults = [
            Fault(i, "hung", "amdsmi_get_processor_type", "", 0.0, parent=parent) for i in indices
        ]
        for fault in faults:
            self.isolation.faults[fault.index] = fault
        return faults


@pytest.fixture(autouse=True)
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Our own backoff constant, shortened so that the test need not wait seconds.
    monkeypatch.setattr(isolation_mod, "PROBE_BASE_SECONDS", 0.01)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_the_partitions_of_one_gpu_are_probed_by_one_worker_and_taken_back_together() -> None:
    async def go() -> Harness:
        h = Harness(ready=[False, True])
        faults = h.isolate(24, 25, 26, parent="0000:5c:00")
        for fault in faults:  # one isolation schedules each of its devices
            h.prober.schedule(fault)
        while not h.taken:
            await asyncio.sleep(0.01)
        await h.prober.stop()
        return h

    h = run(go())
    # One loop for the GPU: each probe a worker of its three partitions, never one apiece.
    assert [r.indices for r in h.spawned] == [[24, 25, 26], [24, 25, 26]]
    assert all(r.discarded for r in h.spawned)
    assert h.spawned[0].asked == [] and h.spawned[1].asked == ["poll"]
    assert h.taken == [[24, 25, 26]]
    assert h.isolation.faults == {}
    # The failed probe is remembered: isolated again, the backoff resumes where it was.
    assert h.isolation._history == {24: 2, 25: 2, 26: 2}


async def probed_twice(h: Harness, index: int) -> Harness:
    """Isolate device ``index`` alone, and probe it until two probes have failed."""
    (fault,) = h.isolate(index, parent="")
    h.prober.schedule(fault)
    while fault.probes < 2:
        await asyncio.sleep(0.01)
    await h.prober.stop()
    return h


def test_a_probe_that_finds_another_device_at_the_index_keeps_it_isolated() -> None:
    h = run(probed_twice(Harness(ready=[True] * 10, serves=[7]), 3))
    assert h.taken == []
    assert list(h.isolation.faults) == [3]
    # The request is never asked of a worker serving the wrong device.
    assert all(r.asked == [] for r in h.spawned)


def test_no_probe_without_a_request_or_after_stop() -> None:
    async def go() -> Harness:
        h = Harness(ready=[True])
        (fault,) = h.isolate(1, parent="")
        h.prober.request = None
        h.prober.schedule(fault)
        h.prober.request = Probe("poll", {}, timeout=1.0)
        await h.prober.stop()
        h.prober.schedule(fault)
        await asyncio.sleep(0.05)
        return h

    assert run(go()).spawned == []


def test_a_probe_whose_call_fails_counts_as_failed() -> None:
    class Failing(ProbeRunner):
        async def call(self, op: str, args: Any, timeout: float) -> Any:
            raise WorkerError("hung", "no answer")

    h = run(probed_twice(Harness(ready=[True] * 10, runner=Failing), 2))
    assert h.taken == [] and list(h.isolation.faults) == [2]
