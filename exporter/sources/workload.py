"""The workload source: attributes devices and GPU processes to pods and Slurm jobs.

It runs on its own timer like any source and never on a scrape. Each poll reads
the device sources' latest data from the store (devices and the processes on
them), asks the kubelet for device assignments when the cached answer is older
than ``workload.k8s.interval``, reads each GPU process's cgroup (and, when useful,
environment) under ``workload.proc_path``, and publishes the join families.

A failed lookup never fails the others: its labels are left out and
``accel_workload_attribution_errors_total{reason}`` counts it. A kubelet that
cannot be asked makes the source report ``kubelet_<reason>``, except with
``workload.k8s.enabled: auto`` before any kubelet ever answered: then a missing
socket means "not a Kubernetes node", and a socket this process may not open
(root-only, the default on most distributions, while the exporter runs as
non-root) or that nobody listens on means "pod attribution is not set up
here". Both leave the Kubernetes part inactive (the reason in ``/status``; the
latter two still counted), and the source up: a default install must not page
on every node.

With ``workload.k8s.pod_labels`` (opt-in) the allowlisted Kubernetes labels of the
pods named by the pass are added as ``accel_pod_labels_info``, from a listing
the API server answers in the background (:mod:`exporter.sources.workload_labels`).

DRA claims the kubelet reports are mapped to devices through this node's
ResourceSlices (``workload.k8s.dra``), listed in the background as well, again as
soon as a claim names a device the listing lacks. With ``enabled: auto`` a node
outside a cluster, without a token, or a cluster that serves no
``resource.k8s.io/v1`` leaves DRA inactive without counting anything.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from exporter import log
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.workload import WorkloadConfig
from exporter.enrich.attribution import Inputs, PodMemory, attribute
from exporter.enrich.cgroup import CgroupIdentity
from exporter.enrich.devices import PROCESS_FAMILIES, DeviceIndex
from exporter.enrich.dra import DraDevice, DraIndex
from exporter.enrich.errors import AttributionError
from exporter.enrich.pod_resources import Assignment, list_assignments, resource_filter
from exporter.enrich.procfs import ProcessFacts, ProcReader
from exporter.enrich.slurm_files import JobFile, read_job_files
from exporter.errors import SourceError
from exporter.family_names import (
    ACCEL_DEVICE_INFO,
    ACCEL_MIG_DEVICE_INFO,
    ACCEL_PROCESS_MEMORY_BYTES,
    ACCEL_PROCESS_SM_UTILIZATION_RATIO,
    ACCEL_PROCESSES,
    ACCEL_WORKLOAD_ATTRIBUTION_ERRORS_TOTAL,
)
from exporter.kube import KubeClient, list_resource_slices
from exporter.model import Reading
from exporter.sources.api_listing import ApiListing
from exporter.sources.base import BlockingCall, Source, StoreReader
from exporter.sources.workload_labels import PodLabelRefresher, pods_named

# Reasons that mean "this node has no kubelet for us" when k8s is enabled: auto.
_NOT_KUBERNETES = frozenset({"socket_missing", "grpc_missing"})
# Reasons that, before any kubelet answered, mean "not set up for pod attribution"
# when k8s is enabled: auto: inactive too, but counted, with what to do.
_NOT_SET_UP = {
    "permission_denied": "the socket is root-only: run the exporter as root (capabilities"
    " may stay dropped) or set workload.k8s.enabled: false",
    "connect_failed": "nothing answers on the socket: check the kubelet's pod-resources API"
    " and the hostPath mount, or set workload.k8s.enabled: false",
}
# With workload.k8s.dra.enabled auto: "no API server here", "no DRA API": inactive.
_DRA_QUIET = frozenset({"api_not_configured", "api_token_unreadable", "dra_not_served"})
# Share of the poll deadline the kubelet call may use, leaving time for /proc.
KUBELET_SHARE = 0.6


class WorkloadSource(Source):
    """Polls attribution: kubelet assignments, process cgroups, Slurm jobs.

    ``kube`` (the ``kubernetes`` section) is where the pod-label and ResourceSlice
    listings find the API server; unset, the in-cluster defaults.
    """

    def __init__(
        self,
        name: str,
        config: WorkloadConfig,
        kube: KubernetesConfig | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(name, config)
        self.workload = config
        kube = KubernetesConfig() if kube is None else kube
        self._log = log.get(source=name)
        self._store: StoreReader | None = None
        self._kubelet_call = BlockingCall(f"{name}-kubelet")
        self._proc_call = BlockingCall(f"{name}-proc")
        self._reader = ProcReader(config.proc_path)
        self._wanted = resource_filter(config.k8s.resource_names, config.k8s.resource_patterns)
        self._memory = PodMemory()
        self._errors: Counter[str] = Counter()
        self._assignments: list[Assignment] | None = None
        self._assignments_at: float | None = None
        self._next_list = 0.0
        # Once a kubelet answered, its socket vanishing is a restart, not "no Kubernetes".
        self._kubelet_seen = False
        self._k8s_state = "pending" if config.k8s.enabled is not False else "disabled"
        self._counts: dict[str, Any] = {}
        self._pod_labels: PodLabelRefresher | None = None
        if config.k8s.enabled is not False and config.k8s.pod_labels.enabled:
            self._pod_labels = PodLabelRefresher(
                name, config.k8s.pod_labels, self._errors, kube=kube, env=env
            )
        self._dra: ApiListing[tuple[DraIndex, Counter[str]]] | None = None
        self._dra_inactive = ""
        self._dra_counted: object = None
        # Claimed DRA devices missing from the slices that already asked for a listing.
        self._dra_asked: set[DraDevice] = set()
        dra = config.k8s.dra
        if config.k8s.enabled is not False and dra.enabled is not False:

            def slices(client: KubeClient) -> tuple[DraIndex, Counter[str]]:
                return DraIndex.from_slices(list_resource_slices(client, client.node))

            client = KubeClient.from_config(kube, dra.timeout, dra.max_reply_bytes, env)
            where = os.environ if env is None else env
            outside = not kube.api_server and not where.get("KUBERNETES_SERVICE_HOST")
            if dra.enabled == "auto" and outside and client.problem is not None:
                # "auto" means "in a cluster": outside one (no API server configured nor
                # in the environment) nothing is listed and nothing logged; /status says why.
                self._dra_inactive = f"inactive: api_not_configured: {client.problem.detail}"
            else:
                self._dra = ApiListing(
                    name,
                    "resource-slices",
                    client,
                    slices,
                    self._errors,
                    interval=dra.interval,
                    min_interval=dra.min_interval,
                    quiet=_DRA_QUIET if dra.enabled == "auto" else frozenset(),
                )

    def _listings(self) -> list[PodLabelRefresher | ApiListing[Any]]:
        return [x for x in (self._pod_labels, self._dra) if x is not None]

    async def start(self) -> None:
        """Start listing pod labels and ResourceSlices in the background, when asked for."""
        for listing in self._listings():
            await listing.start()

    async def wait_ready(self, timeout: float) -> None:
        """Until the first listings ended (one-shot commands want their answers)."""
        for listing in self._listings():
            await listing.wait_first(timeout)

    async def close(self) -> None:
        """Stop the background listings."""
        for listing in self._listings():
            await listing.close()

    def attach(self, store: StoreReader) -> None:
        """Keep the store to read the device sources' data from."""
        self._store = store

    def status(self) -> dict[str, Any]:
        """Kubelet state, cache age and what the last pass saw."""
        age = None
        if self._assignments_at is not None:
            age = round(time.monotonic() - self._assignments_at, 3)
        return {
            "k8s": self._k8s_state,
            "k8s_assignments": None if self._assignments is None else len(self._assignments),
            "k8s_cache_age_seconds": age,
            "slurm": self.workload.slurm.mode
            if self.workload.slurm.enabled is not False
            else "off",
            **(self._pod_labels.status() if self._pod_labels is not None else {}),
            **(self._dra_status() if self._dra is not None else {}),
            **({"k8s_dra": self._dra_inactive} if self._dra_inactive else {}),
            **self._counts,
        }

    def _dra_status(self) -> dict[str, Any]:
        assert self._dra is not None
        listed = self._dra.value
        return {
            **self._dra.status("k8s_dra"),
            "k8s_dra_devices": None if listed is None else len(listed[0]),
        }

    def _dra_index(self) -> DraIndex | None:
        """The last ResourceSlice listing; what it skipped is counted once per listing."""
        if self._dra is None or self._dra.value is None:
            return None
        index, skipped = self._dra.value
        if self._dra_counted is not self._dra.value:
            self._errors.update(skipped)
            self._dra_counted = self._dra.value
        return index

    async def _refresh_kubelet(self) -> tuple[str, str]:
        """Ask the kubelet when due; (reason, detail) of a failure, empty when fine."""
        k8s = self.workload.k8s
        if k8s.enabled is False or time.monotonic() < self._next_list:
            return "", ""
        try:
            found = await self._kubelet_call(
                list_assignments,
                k8s.socket,
                min(k8s.timeout, self.timeout * KUBELET_SHARE),
                k8s.max_message_bytes,
                self._wanted,
            )
        except (AttributionError, SourceError) as exc:
            if k8s.enabled == "auto" and not self._kubelet_seen:
                hint = _NOT_SET_UP.get(exc.reason)
                if exc.reason in _NOT_KUBERNETES or hint is not None:
                    if hint is not None:
                        self._errors[exc.reason] += 1
                        self._k8s_state = f"inactive: {exc.reason}: {exc.detail} ({hint})"
                    else:
                        self._k8s_state = f"inactive: {exc.detail}"
                    self._assignments = None
                    self._next_list = time.monotonic() + k8s.interval
                    return "", ""
            self._errors[exc.reason] += 1
            self._k8s_state = f"failing: {exc.reason}: {exc.detail}"
            self._expire_assignments()
            return exc.reason, exc.detail
        self._assignments = found
        self._kubelet_seen = True
        self._assignments_at = time.monotonic()
        self._next_list = self._assignments_at + k8s.interval
        self._k8s_state = "ok"
        return "", ""

    def _expire_assignments(self) -> None:
        """Keep the last good answer for a while, so one failed call changes nothing."""
        keep = 3 * self.workload.k8s.interval
        if self._assignments_at is not None and time.monotonic() - self._assignments_at > keep:
            self._assignments = None
            self._assignments_at = None

    def _wants_environ(self, identity: CgroupIdentity) -> bool:
        if self.workload.slurm.enabled is not False:
            return True
        return self.workload.k8s.enabled is not False and bool(identity.pod_uid)

    def _read_facts(self, pids: Sequence[int]) -> dict[int, ProcessFacts | AttributionError]:
        out: dict[int, ProcessFacts | AttributionError] = {}
        for pid in pids:
            try:
                out[pid] = self._reader.facts(pid, self._wants_environ)
            except AttributionError as exc:
                out[pid] = exc
        return out

    def _read_files(self) -> tuple[list[JobFile], list[AttributionError]]:
        return read_job_files(self.workload.slurm.files_dir)

    async def poll(self) -> Sequence[Reading]:
        """One attribution pass over the devices and processes last reported."""
        view = self._store.view() if self._store is not None else None
        index = DeviceIndex.from_readings(
            view.readings(ACCEL_DEVICE_INFO) if view is not None else (),
            [r for name in PROCESS_FAMILIES for r in view.readings(name)] if view else (),
            view.readings(ACCEL_MIG_DEVICE_INFO) if view is not None else (),
        )
        kubelet_problem, kubelet_detail = await self._refresh_kubelet()
        pids = sorted({pid for found in index.processes.values() for pid in found})
        facts = await self._proc_call(self._read_facts, pids) if pids else {}
        slurm = self.workload.slurm
        job_files: list[JobFile] | None = None
        if slurm.enabled is not False and slurm.mode == "files":
            job_files, problems = await self._proc_call(self._read_files)
            for problem in problems:
                self._errors[problem.reason] += 1
        result = attribute(
            Inputs(
                index=index,
                facts=facts,
                assignments=self._assignments,
                job_files=job_files,
                k8s=self.workload.k8s.enabled is not False,
                slurm=slurm.enabled is not False,
                dra=self._dra_index(),
                process_memory=_per_process(view, ACCEL_PROCESS_MEMORY_BYTES),
                process_utilization=_per_process(view, ACCEL_PROCESS_SM_UTILIZATION_RATIO),
            ),
            self._memory,
        )
        if self._dra is not None:
            # A claim names a device the slices lack: published since the last listing,
            # probably; ask once per such device (one that never appears, e.g. a driver
            # that publishes no slice for this node, must not keep the listing busy).
            if result.dra_missing - self._dra_asked:
                self._dra.poke()
            self._dra_asked = set(result.dra_missing)
        self._errors.update(result.errors)
        if result.errors:
            self._log.debug("attribution incomplete", errors=dict(result.errors))
        self._counts = {
            "devices_seen": len(index.devices),
            "processes_seen": len(pids),
            "pods_learned": len(self._memory.pods),
        }
        counted = 0.0
        for reading in view.readings(ACCEL_PROCESSES) if view is not None else ():
            counted += reading.value if isinstance(reading.value, float) else 0.0
        if counted and not pids:
            self._counts["hint"] = (
                f"the device sources count {counted:g} GPU processes but list none: set"
                " sources.<nvml|amdsmi>.processes: true for per-process and Slurm attribution"
            )
        readings = list(result.readings)
        if self._pod_labels is not None:
            readings.extend(self._pod_labels.readings(pods_named(result.readings)))
        readings.extend(
            Reading(ACCEL_WORKLOAD_ATTRIBUTION_ERRORS_TOTAL, (reason,), float(count))
            for reason, count in sorted(self._errors.items())
        )
        if kubelet_problem:
            raise SourceError(f"kubelet_{kubelet_problem}", kubelet_detail, readings)
        return readings


def _per_process(view: Any, metric: str) -> dict[tuple[str, int], float]:
    """(uuid, pid) -> value of a per-process family (labels device, uuid, pid)."""
    out: dict[tuple[str, int], float] = {}
    for reading in view.readings(metric) if view is not None else ():
        labels = reading.labels
        if len(labels) >= 3 and labels[2].isdigit() and isinstance(reading.value, float):
            out[(labels[1], int(labels[2]))] = reading.value
    return out
