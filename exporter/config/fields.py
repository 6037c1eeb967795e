"""The field types the loader understands, and the limits shared across sections.

Each section is a frozen dataclass (one module per section group, composed by
:mod:`exporter.config.root`); the loader walks them to validate YAML, environment
variables and flags, so adding a key to a section is all it takes to make it
configurable everywhere. Field types: ``bool``, ``int``, ``float``, ``str``,
:data:`Duration`, :data:`FilePath`, ``Literal``, ``X | None``, unions of a bool
and ``Literal["auto"]``, ``list[...]``, ``dict[str, ...]`` and nested dataclasses.

A key's one-line description is declared with it, as field metadata
(:func:`setting`); a dataclass may still carry a ``HELP`` dict for keys it inherits
and does not redeclare. A dataclass may define ``check() -> list[tuple[str, str]]``
(field, problem) for rules across fields, and ``resolved()`` to fill defaults that
depend on others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

# Seconds, written as "250ms", "15s", "1m" in files, env and flags.
Duration = Annotated[float, "duration"]
# A path that must exist and be readable when set.
FilePath = Annotated[str, "file"]
# A string never logged nor shown (password hashes, tokens).
Secret = Annotated[str, "secret"]

Enabled = Union[bool, Literal["auto"]]  # noqa: UP007 (a runtime alias, read by the loader)


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A config key with its one-line description (``--help-all``, docs/configuration.md).

    ``setting(30.0, "...")`` for a plain default; ``setting(factory=list, help="...")`` for
    one made per instance (lists, dicts, nested sections). The description is the
    field's ``help`` metadata, read by :func:`exporter.config.keys.key_help`.
    """
    metadata = {"help": help}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# The shortest interval of any poll, query or push.
MIN_INTERVAL = 0.1


def timing_problems(interval: float | None, timeout: float | None) -> list[tuple[str, str]]:
    """An ``interval`` of at least :data:`MIN_INTERVAL`, a positive ``timeout`` (None: unset)."""
    out = []
    if interval is not None and interval < MIN_INTERVAL:
        out.append(("interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
    if timeout is not None and timeout <= 0:
        out.append(("timeout", "must be positive"))
    return out


def at_least(section: object, minimum: int, *keys: str, shown: str = "") -> list[tuple[str, str]]:
    """(key, problem) for each of ``keys`` whose value in ``section`` is under ``minimum``.

    ``shown`` writes the minimum for people (``64 KiB (65536)``); unset, the number.
    """
    problem = f"must be at least {shown or minimum}"
    return [(key, problem) for key in keys if getattr(section, key) < minimum]


def positive(section: object, *keys: str) -> list[tuple[str, str]]:
    """(key, problem) for each of ``keys`` whose value in ``section`` is not above 0."""
    return [(key, "must be positive") for key in keys if getattr(section, key) <= 0]
