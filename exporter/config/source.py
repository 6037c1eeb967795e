"""What every source section has: a switch and its timing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from exporter.config.fields import Duration, Enabled, setting, timing_problems


@dataclass(frozen=True)
class SourceConfig:
    """What every source has: a switch and its timing.

    ``timeout`` defaults to the interval (capped at 30 s); ``stale_after`` to
    three intervals. Data older than ``stale_after`` is not exported.
    """

    enabled: Enabled = setting(True, "on, off, or auto (on where the hardware or service is found)")
    interval: Duration = setting(15.0, "time between two polls")
    timeout: Duration | None = setting(
        None, "deadline of one poll (derived: the interval, at most 30s)"
    )
    stale_after: Duration | None = setting(
        None, "older data is not exported (derived: three intervals)"
    )

    def check(self) -> list[tuple[str, str]]:
        """Intervals of at least 100 ms, positive timeouts, stale_after >= interval."""
        out = timing_problems(self.interval, self.timeout)
        if self.stale_after is not None and self.stale_after < self.interval:
            out.append(("stale_after", "must be at least the interval"))
        return out

    def resolved(self) -> SourceConfig:
        """Fill timeout and stale_after from the interval (for display and dumps)."""
        return dataclasses.replace(self, timeout=self.poll_timeout, stale_after=self.stale_seconds)

    @property
    def poll_timeout(self) -> float:
        """Deadline of one poll: ``timeout``, else the interval capped at 30 s."""
        return self.timeout if self.timeout is not None else min(self.interval, 30.0)

    @property
    def stale_seconds(self) -> float:
        """Age after which data is dropped: ``stale_after``, else three intervals."""
        stale = self.stale_after if self.stale_after is not None else 3 * self.interval
        return max(stale, self.interval)
