"""Evidence about a device from outside its own source: a diagnostic run, the fabric, a trend.

A source that learns something about a device it does not read itself (a ``dcgmi
diag`` result file failing GPU 1, a NIC port flapping behind GPU 3, an error rate
climbing) posts it here, keyed by the device's UUID or PCI bus id; the health judge
(:class:`exporter.health.HealthJudge`) reads the live evidence of each device it
judges and turns every item into a health reason and a finding. Each source posts
all of its evidence at once (:meth:`EvidenceBoard.replace`), so what it no longer
posts is gone, and every item carries its own expiry: evidence that nobody renews
stops counting by itself, whatever happens to the source that posted it.

Thread-safe: sources post from their own threads while device sources judge from
theirs. Plain data and a lock, no I/O.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from exporter.actions import Advice
from exporter.verdict import DEGRADED, FAILED, PREDICTED

# The states evidence may lead to; failed only from a diagnostic run (a test that
# failed the device is evidence of a fault; a trend or the fabric is not).
STATES = frozenset({DEGRADED, PREDICTED, FAILED})
FAILING_SOURCES = frozenset({"diag"})

# A PCI address with its domain (0000:3b:00.0, NVML's 00000000:3B:00.0) or without it
# (3b:00.0, as lspci and some tools print it: domain 0).
_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{2}):(?P<dev>[0-9a-f]{2})\.(?P<fn>[0-7])$"
)


def device_key(text: str) -> str:
    """The board's key of a device: a GPU UUID as given (stripped), or a normalized PCI bus id.

    A bus id is normalized as :func:`exporter.sources.pci.normalize_bus_id` does
    (lower case, a 4-digit domain: ``00000000:3B:00.0`` -> ``0000:3b:00.0``); one
    given without its domain (``3b:00.0``) is in domain 0. Anything else is taken as
    a UUID, only stripped: UUIDs are compared as the device reports them.
    """
    stripped = text.strip()
    found = _BUS_ID.match(stripped.lower())
    if found is None:
        return stripped
    domain = int(found["domain"] or "0", 16)
    return f"{domain:04x}:{found['bus']}:{found['dev']}.{found['fn']}"


@dataclass(frozen=True)
class Evidence:
    """One thing known about a device from outside its source, and until when it counts.

    ``source`` is the poster's name (``diag``, ``fabric``, ``trend``), ``reason`` the
    health reason it adds (``diag_failed``, ``pcie_link_downtrained``), ``state`` the
    state that reason leads to (:mod:`exporter.verdict`: ``degraded`` or
    ``predicted_failure``; ``failed`` only for a diagnostic that failed the device),
    ``advice`` the action it asks for and whence (:class:`exporter.actions.Advice`),
    ``observed_at`` and ``expires_at`` wall-clock seconds (the judge ignores it from
    ``expires_at`` on), ``detail`` what exactly was seen, in words.
    """

    source: str
    reason: str
    state: str
    advice: Advice
    observed_at: float
    expires_at: float
    detail: str = ""

    def live(self, now: float) -> bool:
        """Whether it still counts at wall-clock time ``now``."""
        return now < self.expires_at


class EvidenceBoard:
    """The evidence of every source, by source and device key; thread-safe.

    A source replaces all of its own evidence at once; a reader gets the live
    evidence of one device by its UUID and PCI bus id (either may be empty).
    """

    def __init__(self) -> None:
        """An empty board."""
        self._lock = threading.Lock()
        # source -> device key -> its items. Each inner mapping is replaced whole, never
        # changed in place, so a reader may walk a snapshot of it outside the lock.
        self._posted: dict[str, Mapping[str, tuple[Evidence, ...]]] = {}

    def replace(self, source: str, items: Mapping[str, Sequence[Evidence]]) -> None:
        """All of ``source``'s evidence at once, keyed by device key (:func:`device_key`).

        What the source posted before and does not post now is gone. Keys are
        normalized here too, so a poster may give a bus id in any form. An item
        whose ``source`` is not ``source`` is refused (ValueError): a source posts
        under its own name only, so that one source's replace never drops another's;
        so is one whose state is not in :data:`STATES`, or ``failed`` from a source not
        in :data:`FAILING_SOURCES`. Nothing is posted when one item is refused.
        """
        posted: dict[str, tuple[Evidence, ...]] = {}
        for key, seq in items.items():
            for ev in seq:
                if ev.source != source:
                    raise ValueError(f"evidence of {ev.source!r} posted as {source!r}")
                if ev.state not in STATES:
                    raise ValueError(f"evidence state {ev.state!r} is none of {sorted(STATES)}")
                if ev.state == FAILED and source not in FAILING_SOURCES:
                    raise ValueError(f"{source!r} may not post failed evidence")
            if seq:
                norm = device_key(key)
                posted[norm] = posted.get(norm, ()) + tuple(seq)
        frozen = MappingProxyType(posted)
        with self._lock:
            if posted:
                self._posted[source] = frozen
            else:
                self._posted.pop(source, None)

    def for_device(self, uuid: str, pci_bus_id: str, now: float) -> list[Evidence]:
        """The live evidence of the device with this UUID or PCI bus id, every source's.

        Sorted by source, reason and time; an item posted under both keys appears once.
        """
        keys = {device_key(k) for k in (uuid, pci_bus_id) if k.strip()}
        if not keys:
            return []
        with self._lock:
            boards = list(self._posted.values())
        found: dict[Evidence, None] = {}
        for board in boards:
            for key in keys:
                for ev in board.get(key, ()):
                    if ev.live(now):
                        found[ev] = None
        return sorted(found, key=lambda e: (e.source, e.reason, e.observed_at, e.detail))

    def sources(self) -> list[str]:
        """The sources that have evidence posted now, sorted."""
        with self._lock:
            return sorted(self._posted)


# The process-wide board: every source posts here and every judge reads it.
BOARD = EvidenceBoard()
