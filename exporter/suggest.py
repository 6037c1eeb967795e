"""The one "did you mean" of the project: config keys, environment variables, flags, choices.

A mistyped name is answered with the closest known one, so that a key in the YAML
file, its ``ACCEL_EXPORTER_*`` variable, its flag and a command's own choices all
get the same suggestion for the same typo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def closest(word: str, names: Iterable[str], synonyms: Mapping[str, str] | None = None) -> str:
    """The name ``word`` most likely meant: a declared synonym, else the closest; "" if none."""
    if synonyms and word in synonyms:
        return synonyms[word]
    import difflib  # only a typo needs it

    close = difflib.get_close_matches(word, list(names), n=1)
    return close[0] if close else ""


def hint(suggestion: str) -> str:
    """`` (did you mean X?)``, or "" without a suggestion."""
    return f" (did you mean {suggestion}?)" if suggestion else ""
