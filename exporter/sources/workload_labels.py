"""Kubernetes pod labels for the workload source: listed in the background, joined per poll.

The API server is asked on ``workload.k8s.pod_labels.interval`` by a task of its
own (never on a poll, never on a scrape), through a :class:`BlockingCall` under
a deadline; the answer is cached and kept for three intervals when the server
stops answering. A poll only reads the cache: the pods the attribution pass
named (device, MIG and process join rows) get one ``accel_pod_labels_info`` row
each, with the allowlisted keys in configured order (empty when a pod lacks
one). Failures are counted by reason in the source's error counter and shown in
``/status``; they never fail a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from exporter import log
from exporter.catalog import CATALOG
from exporter.config.schema import PodLabelsConfig
from exporter.enrich.errors import AttributionError
from exporter.enrich.kube_api import PodLabels, access, list_pod_labels
from exporter.errors import SourceError
from exporter.model import Reading
from exporter.sources.base import BlockingCall

# The join families whose rows name a pod, by their namespace and pod labels.
POD_FAMILIES = (
    "accel_device_workload_info",
    "accel_mig_workload_info",
    "accel_process_workload_info",
)
# How many intervals a last good answer outlives failures.
KEEP_INTERVALS = 3
# Time the listing thread gets beyond its own socket timeout before it counts as hung.
DEADLINE_MARGIN_SECONDS = 1.0


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
    """Lists this node's pods' allowlisted labels on its own interval and caches them."""

    def __init__(
        self,
        name: str,
        config: PodLabelsConfig,
        errors: Counter[str],
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._clock = clock
        self._errors = errors
        self._env = dict(os.environ if env is None else env)
        self._log = log.get(source=name)
        self._call = BlockingCall(f"{name}-api")
        self._task: asyncio.Task[None] | None = None
        self._attempted = asyncio.Event()
        self._labels: dict[tuple[str, str], Mapping[str, str]] | None = None
        self._listed_at: float | None = None
        self._state = "pending"

    async def start(self) -> None:
        """Start the background listing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="pod-labels")

    async def close(self) -> None:
        """Stop the background listing (a listing thread still running is abandoned)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_first(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the first listing succeeded or failed."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), timeout)

    async def _run(self) -> None:
        while True:
            await self.refresh()
            self._attempted.set()
            await asyncio.sleep(self.config.interval)

    async def refresh(self) -> None:
        """List once; on failure count the reason and keep the last answer for a while."""
        cfg = self.config
        try:
            api = access(cfg.api_server, cfg.node_name, cfg.token_file, cfg.ca_file, self._env)
            found = await asyncio.wait_for(
                self._call(list_pod_labels, api, cfg.timeout, cfg.max_reply_bytes, cfg.keys),
                cfg.timeout + DEADLINE_MARGIN_SECONDS,
            )
        except asyncio.TimeoutError:
            self._failed("api_timeout", "listing the pods took longer than its deadline")
        except SourceError as exc:  # the previous listing thread is still hung
            self._failed("api_timeout", exc.detail)
        except AttributionError as exc:
            self._failed(exc.reason, exc.detail)
        except Exception as exc:  # a bug must not end the listing task
            self._failed("api_error", repr(exc))
        else:
            self._store(found)

    def _store(self, found: list[PodLabels]) -> None:
        if self._state != "ok":
            self._log.info("pod labels listed", pods=len(found))
        self._labels = {(p.namespace, p.pod): p.labels for p in found}
        self._listed_at = self._clock()
        self._state = "ok"

    def _failed(self, reason: str, detail: str) -> None:
        self._errors[reason] += 1
        state = f"failing: {reason}: {detail}"
        if state != self._state:
            self._log.warning("pod labels cannot be listed", reason=reason, detail=detail)
        self._state = state
        keep = KEEP_INTERVALS * self.config.interval
        if self._listed_at is not None and self._clock() - self._listed_at > keep:
            self._labels = None
            self._listed_at = None

    def readings(self, pods: Iterable[tuple[str, str]]) -> list[Reading]:
        """One accel_pod_labels_info row per listed pod of ``pods``."""
        if self._labels is None:
            return []
        out = []
        for namespace, pod in sorted(pods):
            labels = self._labels.get((namespace, pod))
            if labels is None:
                continue  # started after the last listing; it appears at the next
            values = tuple(labels.get(key, "") for key in self.config.keys)
            out.append(Reading("accel_pod_labels_info", (namespace, pod, *values), 1.0))
        return out

    def status(self) -> dict[str, Any]:
        """State, pods cached and cache age, for /status."""
        age = None
        if self._listed_at is not None:
            age = round(self._clock() - self._listed_at, 3)
        return {
            "k8s_pod_labels": self._state,
            "k8s_pod_labels_pods": None if self._labels is None else len(self._labels),
            "k8s_pod_labels_age_seconds": age,
        }
