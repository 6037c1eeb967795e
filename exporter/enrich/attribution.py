"""The join: devices x kubelet assignments x process facts x Slurm jobs -> info readings.

Pure: it gets everything read already and returns readings plus a count of
what could not be attributed and why. Nothing here raises for bad data.

Kubernetes, per process. The kubelet says which containers hold a device, by
name, but not their pod UIDs; a process's cgroup gives its pod UID and
container ID, but not names. They are joined like this:

1. A device held by exactly one container, whose processes all carry one pod
   UID (and one container ID), teaches that UID -> namespace/pod (and container
   ID -> container). Learned names are kept while the pod has GPU processes.
2. A process whose pod UID was learned gets that pod; its container comes from
   its learned container ID, or from the pod's only container on the device.
3. Otherwise (a shared GPU whose pods were never seen alone), a process whose
   ``HOSTNAME`` (the pod name, unless the pod sets ``hostname``) names exactly
   one of the device's pods gets that pod.
4. Otherwise the names stay empty, the UID and container ID are still
   exported, and ``unresolved_pod`` is counted.

DRA. A claim's device is named by (driver, pool, device); the node's ResourceSlices
give its UUID (a MIG device's, with its parent's) or PCI address, which names one
of the devices the sources report. What cannot be followed all the way is counted
and left out, never guessed: no ResourceSlice of the driver on this node
(``dra_unknown_driver``), none with the device (``dra_unknown_device``), a device
without an identifying attribute (``dra_no_identity``), or slices not listed
(``dra_slices_unavailable``). A device whose identity names nothing the sources
report belongs to another kind of driver (a NIC) and is not counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.enrich.devices import DeviceIndex, DeviceRef, MigRef
from exporter.enrich.dra import DraDevice, DraIndex
from exporter.enrich.errors import AttributionError
from exporter.enrich.pod_resources import Assignment
from exporter.enrich.procfs import ProcessFacts, user_name
from exporter.enrich.slurm_files import JobFile
from exporter.family_names import (
    ACCEL_DEVICE_CLAIM_INFO,
    ACCEL_DEVICE_JOB_INFO,
    ACCEL_DEVICE_WORKLOAD_INFO,
    ACCEL_MIG_WORKLOAD_INFO,
    ACCEL_PROCESS_WORKLOAD_INFO,
    ACCEL_WORKLOAD_MEMORY_USED_BYTES,
    ACCEL_WORKLOAD_UTILIZATION_RATIO,
)
from exporter.model import Reading

Container = tuple[str, str, str]  # namespace, pod, container
Pod = tuple[str, str]  # namespace, pod


@dataclass
class PodMemory:
    """Pod UID -> names, and container ID -> name, learned from unambiguous devices."""

    pods: dict[str, Pod] = field(default_factory=dict)
    containers: dict[str, str] = field(default_factory=dict)

    def keep_only(self, uids: set[str], container_ids: set[str]) -> None:
        """Forget pods and containers that no longer have GPU processes."""
        self.pods = {k: v for k, v in self.pods.items() if k in uids}
        self.containers = {k: v for k, v in self.containers.items() if k in container_ids}


@dataclass(frozen=True)
class Inputs:
    """Everything one attribution pass needs.

    ``assignments`` is None when the kubelet was not asked (no socket, k8s off);
    ``job_files`` is None unless Slurm runs in files mode. ``k8s`` and ``slurm``
    say which workload labels to fill.
    """

    index: DeviceIndex
    facts: Mapping[int, ProcessFacts | AttributionError]
    assignments: Sequence[Assignment] | None = None
    job_files: Sequence[JobFile] | None = None
    k8s: bool = True
    slurm: bool = True
    # The node's DRA devices; None when the ResourceSlices were not listed.
    dra: DraIndex | None = None
    # Per-process readings of the device sources, by (uuid, pid): device memory in
    # bytes, SM utilization as a ratio of the device (both: NVIDIA, MPS clients
    # included; memory only: AMD; none: the other vendors).
    process_memory: Mapping[tuple[str, int], float] = field(default_factory=dict)
    process_utilization: Mapping[tuple[str, int], float] = field(default_factory=dict)


@dataclass
class Result:
    """Readings of the three join families and the failures counted this pass."""

    readings: list[Reading] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    # DRA devices claimed but absent from the ResourceSlices (a newer listing may have them).
    dra_missing: set[DraDevice] = field(default_factory=set)


def _dra_device(
    index: DeviceIndex, dra: DraIndex | None, item: Assignment, result: Result
) -> tuple[DeviceRef | None, tuple[MigRef, ...]]:
    """The device (and MIG device) a DRA claim's device is, through the ResourceSlices."""
    assert item.dra is not None
    errors = result.errors
    if dra is None:
        errors["dra_slices_unavailable"] += 1
        return None, ()
    found = dra.get(item.dra)
    if found is None:
        known = item.dra.driver in dra.drivers
        errors["dra_unknown_device" if known else "dra_unknown_driver"] += 1
        result.dra_missing.add(item.dra)
        return None, ()
    if not found.identified:
        errors["dra_no_identity"] += 1
        return None, ()
    for name in (found.uuid, found.parent_uuid, found.pci_bus_id):
        dev = index.resolve(name) if name else None
        if dev is not None:
            # Only the device's own UUID names a MIG device; a parent or PCI address
            # names the whole GPU (or, for AMD, the GPU a partition is on).
            return dev, index.migs(found.uuid) if name == found.uuid else ()
    return None, ()  # a device of another kind (a NIC's driver): not ours


def device_workloads(
    index: DeviceIndex,
    assignments: Sequence[Assignment],
    result: Result,
    dra: DraIndex | None = None,
) -> dict[str, set[Container]]:
    """UUID -> the containers holding that device (or a MIG device of it).

    MIG assignments also add accel_mig_workload_info rows, DRA claims
    accel_device_claim_info rows; unmatched IDs are counted.
    """
    out: dict[str, set[Container]] = {}
    unknown: set[str] = set()
    migs: set[tuple[str, ...]] = set()
    claims: set[tuple[str, ...]] = set()
    for item in assignments:
        if item.dra is not None:
            dev, found_migs = _dra_device(index, dra, item, result)
            if dev is None:
                continue
            ref = item.dra
            owner = (item.namespace, item.pod, item.container)
            claim = (item.claim_namespace, item.claim, ref.driver, ref.pool, ref.device)
            claims.add((dev.device, dev.uuid, *owner, *claim))
        else:
            dev = index.resolve(item.device_id)
            if dev is None:
                unknown.add(item.device_id)
                continue
            found_migs = index.migs(item.device_id)
            owner = (item.namespace, item.pod, item.container)
        out.setdefault(dev.uuid, set()).add(owner)
        for mig in found_migs:
            migs.add((dev.device, dev.uuid, mig.gpu_instance, mig.compute_instance, *owner))
    for labels in sorted(migs):
        result.readings.append(Reading(ACCEL_MIG_WORKLOAD_INFO, labels, 1.0))
    for labels in sorted(claims):
        result.readings.append(Reading(ACCEL_DEVICE_CLAIM_INFO, labels, 1.0))
    if unknown:
        result.errors["unknown_device"] += len(unknown)
    return out


def _learn(
    index: DeviceIndex,
    held: Mapping[str, set[Container]],
    facts: Mapping[int, ProcessFacts],
    memory: PodMemory,
) -> None:
    for uuid, pids in index.processes.items():
        owners = held.get(uuid, set())
        if len(owners) != 1:
            continue
        (namespace, pod, container) = next(iter(owners))
        mine = [facts[p] for p in pids if p in facts]
        uids = {f.cgroup.pod_uid for f in mine}
        if len(uids) != 1 or "" in uids:
            continue  # a foreign or host process shares the device: nothing is certain
        memory.pods[uids.pop()] = (namespace, pod)
        ids = {f.cgroup.container_id for f in mine}
        if len(ids) == 1 and "" not in ids:
            memory.containers[ids.pop()] = container


def _pod_of(
    fact: ProcessFacts, owners: set[Container], memory: PodMemory, errors: Counter[str]
) -> Container | None:
    uid = fact.cgroup.pod_uid
    pod = memory.pods.get(uid)
    if pod is None:
        hostname = fact.env.get("HOSTNAME", "")
        named = {(ns, name) for ns, name, _ in owners if hostname and name == hostname}
        if len(named) == 1:
            pod = named.pop()
            memory.pods[uid] = pod
        else:
            if fact.env_error and len({(ns, name) for ns, name, _ in owners}) > 1:
                errors[f"environ_{fact.env_error}"] += 1
            errors["unresolved_pod"] += 1
            return None
    container = memory.containers.get(fact.cgroup.container_id)
    if container is None:
        names = {c for ns, name, c in owners if (ns, name) == pod}
        container = names.pop() if len(names) == 1 else ""
    return (pod[0], pod[1], container)


def _job_of(fact: ProcessFacts, errors: Counter[str]) -> tuple[str, str, str]:
    """(job_id, user, partition) of a process; empty job_id when it is not in a job."""
    env = fact.env
    job_id = fact.cgroup.job_id or env.get("SLURM_JOB_ID", "")
    if not job_id:
        return "", "", ""
    if fact.env_error:
        errors[f"environ_{fact.env_error}"] += 1
    user = env.get("SLURM_JOB_USER", "") or user_name(fact.cgroup.slurm_uid or fact.uid)
    return job_id, user, env.get("SLURM_JOB_PARTITION", "")


def attribute(inputs: Inputs, memory: PodMemory) -> Result:
    """Build the join readings; ``memory`` carries learned pod names between passes."""
    result = Result()
    errors = result.errors
    index = inputs.index
    good: dict[int, ProcessFacts] = {}
    for pid, fact in inputs.facts.items():
        if isinstance(fact, AttributionError):
            errors[fact.reason] += 1
        else:
            good[pid] = fact

    held: dict[str, set[Container]] = {}
    if inputs.k8s and inputs.assignments is not None:
        held = device_workloads(index, inputs.assignments, result, inputs.dra)
        for dev in index.devices:
            for namespace, pod, container in sorted(held.get(dev.uuid, ())):
                result.readings.append(
                    Reading(
                        ACCEL_DEVICE_WORKLOAD_INFO,
                        (dev.device, dev.uuid, namespace, pod, container),
                        1.0,
                    )
                )
        _learn(index, held, good, memory)

    jobs_by_device: dict[str, dict[str, list[str]]] = {}
    shares = _Shares()
    for dev in index.devices:
        for pid in index.processes.get(dev.uuid, ()):
            known = good.get(pid)
            if known is None:
                continue
            row = _process_row(dev, known, inputs, held, memory, errors)
            if row is None:
                continue
            result.readings.append(Reading(ACCEL_PROCESS_WORKLOAD_INFO, row, 1.0))
            namespace, pod, container = row[3:6]
            if namespace and pod:
                shares.add(inputs, dev, pid, (namespace, pod, container))
            job_id, user = row[-2], row[-1]
            partition = known.env.get("SLURM_JOB_PARTITION", "")
            if job_id and inputs.job_files is None:
                _merge_job(jobs_by_device.setdefault(dev.uuid, {}), job_id, user, partition)

    if inputs.slurm and inputs.job_files is not None:
        for job in inputs.job_files:
            for gpu in job.gpus:
                found = index.resolve(gpu)
                if found is None:
                    errors["unknown_device"] += 1
                    continue
                jobs = jobs_by_device.setdefault(found.uuid, {})
                _merge_job(jobs, job.job_id, job.user, job.partition)

    result.readings.extend(shares.readings())
    for dev in index.devices:
        for job_id, (user, partition) in sorted(jobs_by_device.get(dev.uuid, {}).items()):
            labels = (dev.device, dev.uuid, job_id, user, partition)
            result.readings.append(Reading(ACCEL_DEVICE_JOB_INFO, labels, 1.0))

    memory.keep_only(
        {f.cgroup.pod_uid for f in good.values() if f.cgroup.pod_uid},
        {f.cgroup.container_id for f in good.values() if f.cgroup.container_id},
    )
    return result


class _Shares:
    """Per-process memory and utilization summed per (device, container), for shared GPUs.

    A pod's processes are found through their cgroups, so every client of a
    time-sliced or MPS GPU counts for its own pod (an MPS client is listed by the
    driver with its own PID, not the server's). Utilization is capped at 1: samples
    of one driver period can overlap.
    """

    def __init__(self) -> None:
        self.memory: dict[tuple[str, ...], float] = {}
        self.utilization: dict[tuple[str, ...], float] = {}

    def add(self, inputs: Inputs, dev: DeviceRef, pid: int, owner: Container) -> None:
        key = (dev.device, dev.uuid, *owner)
        used = inputs.process_memory.get((dev.uuid, pid))
        if used is not None:
            self.memory[key] = self.memory.get(key, 0.0) + used
        busy = inputs.process_utilization.get((dev.uuid, pid))
        if busy is not None:
            self.utilization[key] = self.utilization.get(key, 0.0) + busy

    def readings(self) -> list[Reading]:
        out = [
            Reading(ACCEL_WORKLOAD_MEMORY_USED_BYTES, key, value)
            for key, value in sorted(self.memory.items())
        ]
        out += [
            Reading(ACCEL_WORKLOAD_UTILIZATION_RATIO, key, min(value, 1.0))
            for key, value in sorted(self.utilization.items())
        ]
        return out


def _merge_job(jobs: dict[str, list[str]], job_id: str, user: str, partition: str) -> None:
    known = jobs.setdefault(job_id, ["", ""])
    known[0] = known[0] or user
    known[1] = known[1] or partition


def _process_row(
    dev: DeviceRef,
    fact: ProcessFacts,
    inputs: Inputs,
    held: Mapping[str, set[Container]],
    memory: PodMemory,
    errors: Counter[str],
) -> tuple[str, ...] | None:
    """Label values of one accel_process_workload_info row, or None when nothing is known."""
    namespace = pod = container = pod_uid = container_id = job_id = user = ""
    if inputs.k8s:
        pod_uid, container_id = fact.cgroup.pod_uid, fact.cgroup.container_id
        if pod_uid and inputs.assignments is not None:
            found = _pod_of(fact, held.get(dev.uuid, set()), memory, errors)
            if found is not None:
                namespace, pod, container = found
    if inputs.slurm:
        job_id, user, _ = _job_of(fact, errors)
    values = (namespace, pod, container, pod_uid, container_id, job_id, user)
    if not any(values):
        return None
    return (dev.device, dev.uuid, str(fact.pid), *values)
