"""The fault rules of every fake vendor library, from the test's side (``fault_rules.h``).

Each fake's state struct holds one :class:`Faults`; its ctypes mirror declares the
member anonymous, so ``state.rules``, ``state.calls``, ``state.release_generation``
and ``state.hung_now`` read as the state's own fields. :class:`FaultRules` gives a
fake's control class one way to add, clear and release rules.
"""

from __future__ import annotations

import ctypes
from typing import Any

ANY = -1
# A rule error that makes the call crash the calling process (SIGSEGV) in native code.
CRASH = -11
MAX_RULES = 32
FN_LEN = 64


class Rule(ctypes.Structure):
    """``fr_rule_t``: calls of ``fn`` on ``device`` with ``arg`` get a delay, a hang, an error."""

    _fields_ = [
        ("active", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("arg", ctypes.c_int64),
        ("error", ctypes.c_int32),
        ("hang", ctypes.c_int32),
        ("remaining", ctypes.c_int32),
        ("after_calls", ctypes.c_uint32),
        ("matched", ctypes.c_uint32),
        ("delay_ms", ctypes.c_uint32),
        ("fn", ctypes.c_char * FN_LEN),
    ]


class Faults(ctypes.Structure):
    """``fr_faults_t``: the call counter, the release generation, hang counts and the rules."""

    _fields_ = [
        ("calls", ctypes.c_uint64),
        ("release_generation", ctypes.c_uint32),
        ("hangs_entered", ctypes.c_uint32),
        ("hung_now", ctypes.c_uint32),
        ("fr_pad", ctypes.c_uint32),
        ("rules", Rule * MAX_RULES),
    ]


class FaultRules:
    """Fault control of a fake whose mapped ``state`` holds :class:`Faults` (anonymous)."""

    state: Any

    def rule(
        self,
        fn: str,
        error: int = 0,
        *,
        device: int = ANY,
        arg: int = ANY,
        hang: bool = False,
        times: int = -1,
        after_calls: int = 0,
        delay_ms: int = 0,
    ) -> int:
        """Make calls of ``fn`` (an entry point, or "*") on ``device`` with ``arg`` (-1:
        any) sleep ``delay_ms``, hang until released, then answer ``error`` (0: go on),
        ``times`` times (-1: always), once ``after_calls`` matching calls were made.
        Returns the rule's slot."""
        for slot, r in enumerate(self.state.rules):
            if not r.active:
                r.fn, r.device, r.arg, r.error = fn.encode(), device, arg, error
                r.hang, r.remaining, r.after_calls = int(hang), times, after_calls
                r.matched, r.delay_ms = 0, delay_ms
                r.active = 1  # last: the rule goes live when complete
                return slot
        raise RuntimeError("no free fault rule slot")

    def clear_rule(self, slot: int) -> None:
        """Remove one rule; a call hung on it returns within a few milliseconds."""
        self.state.rules[slot].active = 0

    def clear_rules(self) -> None:
        """Remove every rule."""
        for r in self.state.rules:
            r.active = 0

    def release_hangs(self) -> None:
        """Let every hung call return (in every process using this state)."""
        self.state.release_generation += 1

    @property
    def hangs_entered(self) -> int:
        """How many calls have started hanging so far."""
        return int(self.state.hangs_entered)
