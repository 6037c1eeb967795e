"""Who a process belongs to, from the text of ``/proc/<pid>/cgroup``.

Handles cgroup v1 (``N:controllers:/path`` lines) and v2 (``0::/path``), the
kubelet's systemd and cgroupfs drivers (``kubepods-burstable-pod<uid>.slice``
with underscores, ``pod<uid>`` with dashes), container scopes of containerd,
CRI-O, Docker and Podman (``cri-containerd-<id>.scope``, ``crio-<id>.scope``,
``docker-<id>.scope``, ``libpod-<id>.scope``; with the cgroupfs driver the same
names without ``.scope``, e.g. CRI-O's ``crio-<id>``; or a bare 64-hex directory), and
Slurm (``.../job_<id>/step_<n>/...``, v1 ``/slurm/uid_<uid>/job_<id>/...``).

Paths are searched segment by segment rather than anchored, because a reader in
its own cgroup namespace sees other processes' paths relative to its root
(``/../../kubepods.slice/...``). A file with any malformed line is rejected as a
whole: a half-understood file must not produce a confident wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(\d+):([^:]*):(/.*)$")
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_POD = re.compile(rf"(?:^|-)pod({_UID})(?:\.slice)?$")
# systemd driver: <runtime>-<id>.scope; cgroupfs driver (CRI-O): <runtime>-<id>.
_SCOPE = re.compile(r"^(cri-containerd|crio|docker|libpod)-([0-9a-f]{64})(?:\.scope)?$")
_BARE_ID = re.compile(r"^[0-9a-f]{64}$")
_JOB = re.compile(r"^job_(\d+)$")
_SLURM_UID = re.compile(r"^uid_(\d+)$")

# Scope prefix -> the scheme Kubernetes uses in a pod's status.containerID.
_RUNTIMES = {
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "docker": "docker",
    "libpod": "podman",
}


class CgroupParseError(ValueError):
    """The cgroup file has a line that is not ``N:controllers:/path``."""


@dataclass(frozen=True)
class CgroupIdentity:
    """What a process's cgroup path says about it; empty strings when unknown.

    ``container_id`` is written as Kubernetes writes it (``containerd://<id>``)
    so it joins with kube-state-metrics; without a known runtime it is the bare id.
    """

    pod_uid: str = ""
    container_id: str = ""
    job_id: str = ""
    slurm_uid: str = ""

    @property
    def empty(self) -> bool:
        """True when the path told nothing."""
        return not (self.pod_uid or self.container_id or self.job_id or self.slurm_uid)


def _from_path(path: str) -> CgroupIdentity:
    pod_uid = container_id = job_id = slurm_uid = ""
    after_pod = False
    previous = ""
    for segment in path.split("/"):
        if not segment or segment == "..":
            continue
        parent, previous = previous, segment
        pod = _POD.search(segment)
        if pod is not None:
            pod_uid = _normalise_uid(pod.group(1))
            after_pod = True
            continue
        scope = _SCOPE.match(segment)
        if scope is not None:
            container_id = f"{_RUNTIMES[scope.group(1)]}://{scope.group(2)}"
            continue
        if _BARE_ID.match(segment):
            # cgroupfs drivers: .../pod<uid>/<id> (runtime unknown) or /docker/<id>.
            if parent == "docker":
                container_id = f"docker://{segment}"
            elif after_pod:
                container_id = segment
            continue
        job = _JOB.match(segment)
        if job is not None:
            job_id = job.group(1)
            continue
        uid = _SLURM_UID.match(segment)
        if uid is not None:
            slurm_uid = uid.group(1)
    return CgroupIdentity(pod_uid, container_id, job_id, slurm_uid)


def _normalise_uid(raw: str) -> str:
    """The systemd driver writes pod UIDs with underscores; Kubernetes uses dashes."""
    return raw.replace("_", "-")


def parse_cgroup(text: str) -> CgroupIdentity:
    """Identity from a whole cgroup file; CgroupParseError on any malformed line.

    With cgroup v1 every hierarchy has its own line; a container's lines agree,
    so the first line that tells something about each field wins.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CgroupParseError("the cgroup file is empty")
    merged: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        match = _LINE.match(line)
        if match is None:
            raise CgroupParseError(f"line {number} is not N:controllers:/path: {line[:80]!r}")
        found = _from_path(match.group(3))
        for key in ("pod_uid", "container_id", "job_id", "slurm_uid"):
            value = getattr(found, key)
            if value and key not in merged:
                merged[key] = value
    return CgroupIdentity(**merged)
