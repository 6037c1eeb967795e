"""What the event threads of the device backends share: never spin on a wait.

Both vendor libraries block in their event wait for up to a timeout. Some
return at once instead: rocm_smi answers NO_DATA straight away once the
kernel's event file reports a hang-up, a driver or mock may answer TIMEOUT
without waiting. Looping on such a call would burn a whole core, so a wait
that comes back early without an event is followed by sleeping out its rest.
"""

from __future__ import annotations

import threading
import time


def rest_after_empty_wait(stop: threading.Event, began: float, wait_seconds: float) -> None:
    """Sleep (interruptibly, via ``stop``) until ``wait_seconds`` after ``began``.

    ``began`` is the ``time.monotonic()`` taken just before the wait.
    """
    left = wait_seconds - (time.monotonic() - began)
    if left > 0:
        stop.wait(left)
