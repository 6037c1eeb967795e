"""The health verdict of one device as a typed record: what every consumer reads.

The health judge (:mod:`exporter.health`) makes one :class:`DeviceHealth` per device
at every poll; the device source hands them to the scheduler, which puts them on the
poll's :class:`~exporter.model.Snapshot`, and the store's view offers those of fresh
snapshots (``View.health()``). The health families of /metrics, ``/v1/devices``, the
Kubernetes writer, the checks and the AMD compat series are all derived from these
records: no consumer reads the verdict back out of exported label positions.

Plain data, no I/O: the ground layer (``model`` imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

OK, DEGRADED, FAILED, PREDICTED = "ok", "degraded", "failed", "predicted_failure"
# The exporter cannot vouch for the device: its own worker is down or restarting, the
# source is reloading, or the data is stale. Evidence about the device, none either way:
# nothing is tainted for it, and no taint is lowered or lifted.
UNKNOWN = "unknown"
# The exported states (OpenTelemetry's hw.status): an unknown device has none of them.
STATES = (OK, DEGRADED, FAILED, PREDICTED)
RANK = {FAILED: 3, DEGRADED: 2, PREDICTED: 1, OK: 0}


@dataclass(frozen=True)
class Finding:
    """One thing a device reported, the action it calls for, how far it reaches and what next.

    ``action`` is a word of the one vocabulary (``exporter.catalog.vocabulary.
    RECOMMENDED_ACTIONS``), ``scope`` one of ``ACTION_SCOPES`` (how far the action
    reaches: a baseboard replacement takes every GPU of the board), ``escalation`` the
    action to take when this one does not clear the finding ("" when the table names
    none), ``detail`` what exactly to do, in words (the vendor guide's instruction:
    ``reseat the GPU tray ...``), ``provenance`` one of ``ACTION_PROVENANCES`` and
    ``reference`` the table it was read from (``NVIDIA Xid Catalog ...``),
    ``escalation_scope`` how far the escalation reaches ("": as far as ``scope``; AMD's
    tray reseat escalates to the whole baseboard's RMA). See docs/health.md.
    """

    # The source code: xid_79, afid_30, recovery_action_gpu_reset, or a health reason.
    reason: str
    action: str
    # The vendor catalog's buckets, where there is a catalog (XIDs); else "".
    immediate: str = ""
    investigatory: str = ""
    # Unix time of the event (XIDs, AFIDs); 0 for a state read at the poll.
    at: float = 0.0
    # The severity of an AFID that counts (exporter.afids.severity: the table's, else the
    # CPER record's): fatal, fail_to_init, non_fatal_uncorrected, non_fatal_corrected,
    # any, unknown; else "".
    severity: str = ""
    scope: str = "device"
    escalation: str = ""
    detail: str = ""
    provenance: str = "exporter_rule"
    reference: str = ""
    escalation_scope: str = ""


@dataclass(frozen=True)
class Reason:
    """One health reason and the state it leads to (``xid_79`` -> failed)."""

    reason: str
    state: str


@dataclass(frozen=True)
class DeviceHealth:
    """The verdict of one device as one poll left it.

    ``state`` is one of :data:`STATES` or :data:`UNKNOWN`; then ``unknown_why`` says
    why in a short phrase that names the worker's or the source's reason
    (``worker restarting: timeout``, ``worker down: library_not_found``,
    ``worker starting``, ``reloading``: exporter.sources.device), and ``reasons``,
    ``findings`` and ``action`` are what the judge remembers of the device (the XIDs
    and AFIDs still in their window), never anything read this poll.
    ``reasons`` are sorted by name, ``findings`` by reason; ``action`` is the most
    disruptive action the findings ask for (kept while the state is unknown: what the
    device asked for before is remembered evidence). ``since`` is the Unix time the
    state last changed, ``updated`` that of the poll that judged it.

    ``scope`` is how far the device's trouble reaches (the widest scope of all the
    findings that ask an action, not only of those asking ``action``), ``scope_uuids``
    the uuids of every device it reaches, this one included, sorted (empty while
    ``action`` is ``none``; :mod:`exporter.scope` says
    how a scope whose members are not known widens), ``escalation`` the next action
    those findings name and ``escalation_scope`` how far that reaches ("": as far as
    ``scope``). ``downgraded`` counts what the noisy-signal registry lowered, by
    signal and entry.
    """

    device: str
    uuid: str
    state: str
    reasons: tuple[Reason, ...]
    findings: tuple[Finding, ...]
    action: str
    since: float
    updated: float
    unknown_why: str = ""
    scope: str = "device"
    scope_uuids: tuple[str, ...] = ()
    escalation: str = ""
    escalation_scope: str = ""
    # (signal, registry entry, count): the trend hits the noisy-signal registry lowered
    # or took away on this device since the daemon started (exporter.noisy_signals).
    downgraded: tuple[tuple[str, str, float], ...] = ()

    @property
    def known(self) -> bool:
        """Whether the state rests on data the exporter can vouch for."""
        return self.state != UNKNOWN

    def reason_states(self) -> dict[str, str]:
        """Each reason with the state it leads to."""
        return {r.reason: r.state for r in self.reasons}

    def reason_names(self) -> tuple[str, ...]:
        """The reasons' names, sorted."""
        return tuple(r.reason for r in self.reasons)
