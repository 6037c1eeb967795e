"""The ``workload`` section: which pod, container or Slurm job uses each device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from exporter.config.fields import (
    MIN_INTERVAL,
    Duration,
    Enabled,
    at_least,
    positive,
    setting,
    timing_problems,
)
from exporter.config.kubernetes import LABEL_KEY, MOVED
from exporter.config.source import SourceConfig

# The kubelet's pod-resources reply grows with pods x devices; gRPC's default 4 MiB is
# known to be too small on busy nodes (dcgm-exporter#509), so never allow less than this.
MIN_POD_RESOURCES_MESSAGE_BYTES = 16 * 1024 * 1024
# No series carries more labels than this (Mimir refuses series over 30 by default,
# target labels and __name__ included); accel_pod_labels_info has namespace, pod and
# one label per allowlisted key.
MAX_SERIES_LABELS = 15
MAX_POD_LABEL_KEYS = MAX_SERIES_LABELS - 2
# Workload labels that may be stamped onto device series.
STAMPABLE_LABELS = ("namespace", "pod", "container")


@dataclass(frozen=True)
class PodLabelsConfig:
    """Kubernetes pod labels from the API server, through an allowlist (off by default).

    The pods of this node are listed (``fieldSelector=spec.nodeName``) with the
    pod's service account, on their own interval, and cached; the labels in
    ``keys`` of the pods that use an accelerator are exported on
    ``accel_pod_labels_info`` as ``label_<key>``. Needs RBAC get/list/watch on pods.
    The API server and credentials are the ``kubernetes`` section's.
    """

    # The API server and credentials moved to the kubernetes section.
    RENAMED: ClassVar[dict[str, str]] = MOVED

    enabled: bool = setting(False, "export allowlisted pod labels from the API server")
    # The allowlist: exact label keys (e.g. team, app.kubernetes.io/name). The exported
    # label set is fixed when the daemon starts, so no patterns.
    keys: list[str] = setting(factory=list, help="the allowlist of pod label keys (exact names)")
    interval: Duration = setting(60.0, "time between two pod listings")
    timeout: Duration = setting(10.0, "deadline of one pod listing")
    # A node's pod list is small; a larger reply is refused (never read into memory).
    max_reply_bytes: int = setting(16 * 1024 * 1024, "largest pod list accepted")

    def check(self) -> list[tuple[str, str]]:
        """Label keys valid and distinct once exported; positive timings."""
        import re

        from exporter.catalog.workload import pod_label_name

        out = []
        if self.enabled and not self.keys:
            out.append(("keys", "enabled needs at least one label key (the allowlist)"))
        if len(self.keys) > MAX_POD_LABEL_KEYS:
            out.append(
                (
                    "keys",
                    f"at most {MAX_POD_LABEL_KEYS} keys: with namespace and pod, a series carries"
                    f" at most {MAX_SERIES_LABELS} labels (docs/profiles.md)",
                )
            )
        seen: dict[str, str] = {}
        for i, key in enumerate(self.keys):
            if not re.match(LABEL_KEY, key) or len(key) > 317:
                out.append((f"keys.{i}", f"{key!r} is not a Kubernetes label key"))
                continue
            name = pod_label_name(key)
            if name in seen:
                out.append((f"keys.{i}", f"{key!r} is exported as {name}, like {seen[name]!r}"))
            seen[name] = key
        out += timing_problems(self.interval, self.timeout)
        return out + at_least(self, 64 * 1024, "max_reply_bytes", shown="64 KiB (65536)")


@dataclass(frozen=True)
class DraConfig:
    """Dynamic Resource Allocation: this node's ResourceSlices, to map DRA claims to devices.

    The kubelet names a DRA device by (driver, pool, device); the driver's
    ResourceSlice (``resource.k8s.io/v1``) carries its UUID or PCI address. The
    slices of this node are listed from the API server (the server, node name and
    credentials of the ``kubernetes`` section), cached, and listed again on ``interval`` or as
    soon as a claim names a device the cache lacks. Needs RBAC get/list/watch on
    ``resourceslices.resource.k8s.io``.
    """

    enabled: Enabled = setting(
        "auto", "map DRA claims to devices through ResourceSlices (auto: in a cluster)"
    )
    interval: Duration = setting(300.0, "time between two ResourceSlice listings")
    min_interval: Duration = setting(
        5.0, "shortest time between listings asked for by an unknown device"
    )
    timeout: Duration = setting(10.0, "deadline of one ResourceSlice listing")
    max_reply_bytes: int = setting(16 * 1024 * 1024, "largest ResourceSlice list accepted")

    def check(self) -> list[tuple[str, str]]:
        """Positive timings, ordered; a reply limit of at least 64 KiB."""
        out = []
        if self.min_interval < MIN_INTERVAL:
            out.append(("min_interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.interval < self.min_interval:
            out.append(("interval", "must be at least min_interval"))
        out += positive(self, "timeout")
        return out + at_least(self, 64 * 1024, "max_reply_bytes", shown="64 KiB (65536)")


@dataclass(frozen=True)
class K8sEnrichConfig:
    """Kubernetes pod attribution from the kubelet pod-resources API (v1 List)."""

    # Keys that were renamed: the loader names the new key in its error.
    RENAMED: ClassVar[dict[str, str]] = {
        "pod_label_allowlist": "stamp_labels; Kubernetes pod labels are pod_labels.keys"
    }

    enabled: Enabled = setting(
        "auto", "attribute devices to pods through the kubelet (auto: if its socket exists)"
    )
    socket: str = setting(
        "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet pod-resources socket"
    )
    # How often the kubelet is asked; between refreshes the last answer is reused.
    interval: Duration = setting(30.0, "time between two kubelet queries")
    timeout: Duration = setting(5.0, "deadline of one kubelet query")
    resource_names: list[str] = setting(
        factory=lambda: ["nvidia.com/gpu", "amd.com/gpu"],
        help="extended resource names of accelerators",
    )
    # Regexes of extra resource names: MIG profiles (nvidia.com/mig-1g.10gb), and the
    # shared GPUs of time-slicing or MPS with renameByDefault (nvidia.com/gpu.shared).
    resource_patterns: list[str] = setting(
        factory=lambda: [r"^nvidia\.com/mig-.*$", r"^nvidia\.com/gpu\.shared$"],
        help="regexes of more resource names (MIG, shared GPUs)",
    )
    max_message_bytes: int = setting(64 * 1024 * 1024, "largest pod-resources reply accepted")
    # Stamp workload labels onto device series (off: join on accel_device_workload_info).
    stamp_device_series: bool = setting(False, "also put workload labels on device series")
    # The labels stamped, from namespace, pod, container; nothing is stamped unless listed.
    stamp_labels: list[str] = setting(
        factory=list, help="the labels stamped (namespace, pod, container)"
    )
    pod_labels: PodLabelsConfig = setting(
        factory=PodLabelsConfig, help="allowlisted pod labels from the API server (off by default)"
    )
    dra: DraConfig = setting(
        factory=DraConfig, help="DRA claims mapped to devices through the node's ResourceSlices"
    )

    def check(self) -> list[tuple[str, str]]:
        """Valid regexes, positive timings, a reply limit of at least 16 MiB."""
        import re

        out = []
        for i, pattern in enumerate(self.resource_patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                out.append((f"resource_patterns.{i}", f"is not a valid regex: {exc}"))
        out += timing_problems(self.interval, self.timeout)
        out += at_least(
            self, MIN_POD_RESOURCES_MESSAGE_BYTES, "max_message_bytes", shown="16 MiB (16777216)"
        )
        if not self.socket:
            out.append(("socket", "needs a path"))
        for i, label in enumerate(self.stamp_labels):
            if label not in STAMPABLE_LABELS:
                out.append((f"stamp_labels.{i}", f"must be one of {list(STAMPABLE_LABELS)}"))
        if self.stamp_device_series and not self.stamp_labels:
            out.append(("stamp_labels", "stamp_device_series needs at least one label here"))
        if self.pod_labels.enabled and self.enabled is False:
            out.append(("pod_labels.enabled", "needs workload.k8s.enabled auto or true"))
        return out


@dataclass(frozen=True)
class SlurmEnrichConfig:
    """Slurm job attribution from process cgroups and environments, or prolog files."""

    enabled: Enabled = setting("auto", "attribute devices to Slurm jobs (auto: where Slurm runs)")
    mode: Literal["proc", "files"] = setting(
        "proc", "proc: from process cgroups and environments; files: prolog files"
    )
    files_dir: str = setting(
        "/run/accel-exporter/slurm", "where contrib/slurm/prolog.sh writes its files"
    )


@dataclass(frozen=True)
class WorkloadConfig(SourceConfig):
    """Workload attribution: one source ("workload") joining devices, processes and workloads.

    It reads the device sources' latest data from the store (never on scrape), the
    kubelet (``k8s``) and /proc or prolog files (``slurm``), on its own interval.
    """

    enabled: Enabled = "auto"
    interval: Duration = 15.0
    proc_path: str = setting("/proc", "where /proc is mounted (the host's, in a container)")
    k8s: K8sEnrichConfig = setting(
        factory=K8sEnrichConfig, help="Kubernetes pods, from the kubelet pod-resources API"
    )
    slurm: SlurmEnrichConfig = setting(
        factory=SlurmEnrichConfig, help="Slurm jobs, from process cgroups or prolog files"
    )
