"""A vendor binding module as a backend sees it: every function it calls exists.

The extras allow a range of binding releases (nvidia-ml-py, amdsmi), and an
older one lacks functions a newer backend calls. Looking them up field by field
would let one missing name escape the per-field guards and fail a whole poll
(or the bootstrap). Instead each function is resolved once, at bootstrap; one
the module lacks is replaced by a stand-in that fails the way the vendor's own
"this is not available here" does, so the field is omitted like any other
field the device does not offer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class Binding:
    """``module`` with each of ``functions`` guaranteed; other names are the module's."""

    def __init__(
        self,
        module: Any,
        functions: Iterable[str],
        absent: Callable[[str], Callable[..., Any]],
    ) -> None:
        self.module = module
        self.missing: list[str] = []
        for name in functions:
            fn = getattr(module, name, None)
            if fn is None:
                self.missing.append(name)
                fn = absent(name)
            setattr(self, name, fn)

    def __getattr__(self, name: str) -> Any:
        # Exceptions, enums, constants: the module's own (AttributeError alike),
        # kept on the instance so the next lookup is a plain attribute.
        value = getattr(self.module, name)
        setattr(self, name, value)
        return value

    def has(self, name: str) -> bool:
        """True when the module itself has ``name`` (not a stand-in)."""
        return hasattr(self.module, name)
