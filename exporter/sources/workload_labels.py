"""Kubernetes pod labels for the workload source: listed in the background, joined per poll.

The API server is asked on ``workload.k8s.pod_labels.interval`` by an
:class:`~exporter.sources.api_listing.ApiListing`. A poll only reads the cache: the
pods the attribution pass named (device, MIG and process join rows) get one
``accel_pod_labels_info`` row each, with the allowlisted keys in configured order
(empty when a pod lacks one).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from exporter.catalog import CATALOG
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.workload import PodLabelsConfig
from exporter.enrich.pod_labels import parse_pods
from exporter.family_names import (
    ACCEL_DEVICE_CLAIM_INFO,
    ACCEL_DEVICE_WORKLOAD_INFO,
    ACCEL_MIG_WORKLOAD_INFO,
    ACCEL_POD_LABELS_INFO,
    ACCEL_PROCESS_WORKLOAD_INFO,
)
from exporter.kube import KubeClient, list_pods
from exporter.model import Reading
from exporter.sources.api_listing import ApiListing

# The join families whose rows name a pod, by their namespace and pod labels.
POD_FAMILIES = (
    ACCEL_DEVICE_WORKLOAD_INFO,
    ACCEL_MIG_WORKLOAD_INFO,
    ACCEL_PROCESS_WORKLOAD_INFO,
    ACCEL_DEVICE_CLAIM_INFO,
)


def pods_named(readings: Iterable[Reading]) -> set[tuple[str, str]]:
    """(namespace, pod) of every join row that names a pod."""
    out: set[tuple[str, str]] = set()
    for reading in readings:
        if reading.metric not in POD_FAMILIES:
            continue
        labels = dict(zip(CATALOG[reading.metric].labels, reading.labels, strict=False))
        if labels.get("namespace") and labels.get("pod"):
            out.add((labels["namespace"], labels["pod"]))
    return out


class PodLabelRefresher:
    """Lists this node's pods' allowlisted labels on its own interval and caches them.

    The API server and credentials are ``kube``'s (the ``kubernetes`` section).
    """

    def __init__(
        self,
        name: str,
        config: PodLabelsConfig,
        errors: Counter[str],
        *,
        kube: KubernetesConfig,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        client = KubeClient.from_config(kube, config.timeout, config.max_reply_bytes, env)

        def fetch(client: KubeClient) -> dict[tuple[str, str], Mapping[str, str]]:
            found = parse_pods(list_pods(client, client.node), config.keys)
            return {(p.namespace, p.pod): p.labels for p in found}

        self._listing = ApiListing(
            name, "pod-labels", client, fetch, errors, interval=config.interval, clock=clock
        )

    async def start(self) -> None:
        """Start the background listing."""
        await self._listing.start()

    async def close(self) -> None:
        """Stop the background listing (a listing thread still running is abandoned)."""
        await self._listing.close()

    async def wait_first(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the first listing succeeded or failed."""
        await self._listing.wait_first(timeout)

    async def refresh(self) -> None:
        """List once; on failure count the reason and keep the last answer for a while."""
        await self._listing.refresh()

    def readings(self, pods: Iterable[tuple[str, str]]) -> list[Reading]:
        """One accel_pod_labels_info row per listed pod of ``pods``."""
        listed = self._listing.value
        if listed is None:
            return []
        out = []
        for namespace, pod in sorted(pods):
            labels = listed.get((namespace, pod))
            if labels is None:
                continue  # started after the last listing; it appears at the next
            values = tuple(labels.get(key, "") for key in self.config.keys)
            out.append(Reading(ACCEL_POD_LABELS_INFO, (namespace, pod, *values), 1.0))
        return out

    def status(self) -> dict[str, Any]:
        """State, pods cached and cache age, for /status."""
        listed = self._listing.value
        return {
            **self._listing.status("k8s_pod_labels"),
            "k8s_pod_labels_pods": None if listed is None else len(listed),
        }
