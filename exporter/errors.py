"""Errors the daemon converts vendor and runtime faults into.

Each carries a short snake_case ``reason`` (exported as a label) and a human
``detail`` (logged and shown in ``/status``). Sources raise these; the scheduler
turns them into ``up 0`` plus the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.model import Reading


class ExporterError(Exception):
    """Base class of every error the daemon raises on purpose."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail or reason


class SourceError(ExporterError):
    """A poll failed; ``readings`` may hold what is still true (e.g. devices marked down)."""

    def __init__(self, reason: str, detail: str = "", readings: Sequence[Reading] = ()) -> None:
        super().__init__(reason, detail)
        self.readings = tuple(readings)


# How often a source that cannot run here is probed again (a driver installed after
# the daemon started is picked up). One clock per source: a source that probes by
# itself (a worker runner starts a new worker when its last probe is this old) says
# when in SourceUnavailable.retry_in, and the scheduler polls it then; a source
# without a clock of its own is polled this often.
UNAVAILABLE_REPROBE_SECONDS = 60.0


class SourceUnavailable(SourceError):
    """The source cannot run on this machine (library or driver missing).

    With ``enabled: auto`` this is a normal state, not a failure: the source is
    reported unavailable and probed again later. ``retry_in``: seconds until the
    source will look again by itself (None: whenever it is polled next).
    """

    def __init__(
        self,
        reason: str,
        detail: str = "",
        readings: Sequence[Reading] = (),
        retry_in: float | None = None,
    ) -> None:
        super().__init__(reason, detail, readings)
        self.retry_in = retry_in


class SourcePending(SourceError):
    """The source is still getting ready (a worker bootstrapping): not a result yet.

    The scheduler records nothing for such a poll and asks again soon, so a slow
    bootstrap is neither a failure nor a completed first poll.
    """


class WorkerError(SourceError):
    """A worker process missed a deadline, crashed, or answered garbage."""


class ConfigError(ExporterError):
    """The configuration is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("invalid_config", "; ".join(problems))
        self.problems = list(problems)


class KubeError(Exception):
    """A Kubernetes API request that got no usable answer; ``reason`` is a short label.

    Raised by :mod:`exporter.kube` and by its transport :mod:`exporter.kube_wire`, which
    both import it from here (the transport is loaded by the client, never the reverse).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
