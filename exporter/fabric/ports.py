"""A port's flaps and outages, counted from two signals that see the same downs.

Two things say a port went down: its state, ``ACTIVE`` at one poll and not at the
next, and its ``link_downed`` counter growing. The state sees a down that lasts
past a poll; the counter also sees one too short for any poll to catch (down and
back up between two reads), but only downs the link itself failed into, not an
administrative one. So each interval between two polls counts
``max(state says 1, counter grew by n)`` flaps: a down both see is counted once, a
burst the counter saw in full is counted in full.

Reading ``state`` and ``counters/link_downed`` is two reads, and a down may fall
between them: the state then shows it one poll before the counter does, or the
counter one poll before the state. A one-poll credit covers either order: a down
the state counted and the counter has not shown yet is taken off the counter's
growth at the next poll, and a state down at the poll after the counter alone
counted one (the state read ACTIVE around it) is that same down. A credit lasts one
poll, so a genuine second down is never hidden for longer than that.

Outages are timed from the poll that saw a port down after it was up, to the poll
that sees it up again (to a poll interval); an outage under way is included in the
total. A port never seen up (unused, cable absent, disabled) has no outage. A
counter that goes backwards (a driver reload, a firmware reset) is a new baseline:
never a negative count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class PortMemory:
    """What the fabric source remembers of one port (persisted in its state file)."""

    # The state at the last poll (None: never read).
    up: bool | None = None
    # The link_downed value of the last poll: the baseline of the next (None: none yet).
    link_downed: int | None = None
    flaps: int = 0
    # Seconds of outages that ended; the one under way is counted from down_since.
    outage_closed: float = 0.0
    # Wall clock of the poll that saw the port go down (None: no outage under way).
    down_since: float | None = None
    # The length of the last outage that ended (None: none yet).
    last_outage: float | None = None
    # A down the state counted that the counter has not shown yet (one poll only).
    state_credit: int = 0
    # A down the counter alone counted, the state ACTIVE on both sides (one poll only).
    counter_credit: int = 0

    def outage_seconds(self, now: float) -> float:
        """Seconds of outage so far, the one under way included."""
        running = max(0.0, now - self.down_since) if self.down_since is not None else 0.0
        return self.outage_closed + running

    def to_wire(self) -> dict[str, Any]:
        """A JSON object for the state file."""
        return asdict(self)

    @classmethod
    def from_wire(cls, raw: Any) -> PortMemory:
        """The memory a state file holds; ValueError when it is not one."""
        if not isinstance(raw, dict):
            raise ValueError("a port's memory is not an object")
        out = cls()
        for f in fields(cls):
            if f.name not in raw:
                continue
            value = raw[f.name]
            default = getattr(out, f.name)
            if value is not None and not _same_kind(value, default, f.name):
                raise ValueError(f"{f.name} is {value!r}")
            setattr(out, f.name, float(value) if isinstance(default, float) else value)
        if out.flaps < 0 or out.outage_closed < 0 or (out.link_downed or 0) < 0:
            raise ValueError("a negative count")
        return out

    def new_boot(self) -> None:
        """The host rebooted since: counter baselines and the port's state mean nothing now.

        The counts go on; an outage under way when the host went down is closed at
        what was timed (its end is unknown).
        """
        self.link_downed = None
        self.up = None
        self.state_credit = self.counter_credit = 0
        self.down_since = None


_NULLABLE = {"up": bool, "link_downed": int, "down_since": float, "last_outage": float}


def _same_kind(value: Any, default: Any, name: str) -> bool:
    want = _NULLABLE.get(name, type(default))
    if want is bool:
        return isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Step:
    """What one poll changed: flaps it counted, and the outage it closed (seconds) if any."""

    flaps: int = 0
    closed_outage: float | None = None


def observe(memory: PortMemory, up: bool, link_downed: int | None, now: float) -> Step:
    """Update ``memory`` with one poll's state and link_downed; what changed (module doc)."""
    delta = 0
    if link_downed is not None:
        if memory.link_downed is not None and link_downed >= memory.link_downed:
            delta = link_downed - memory.link_downed
        # First sight, or gone backwards (a driver reload): a new baseline.
        memory.link_downed = link_downed
    went_down = memory.up is True and not up
    from_state = 1 if went_down else 0
    if from_state and delta == 0 and memory.counter_credit:
        from_state = 0  # the counter counted this down at the last poll
    from_counter = max(0, delta - memory.state_credit)
    flaps = max(from_state, from_counter)
    memory.state_credit = 1 if went_down and delta == 0 and from_state else 0
    memory.counter_credit = 1 if delta > 0 and up and memory.up is True else 0
    memory.flaps += flaps
    closed = None
    if went_down:
        memory.down_since = now
    elif up and memory.down_since is not None:
        closed = max(0.0, now - memory.down_since)
        memory.outage_closed += closed
        memory.last_outage = closed
        memory.down_since = None
    memory.up = up
    return Step(flaps, closed)
