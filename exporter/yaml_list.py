"""The list under one key of a YAML document: how the packaged registries are written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

# libyaml's loader where PyYAML has it (its wheels do): the same documents, about 6x
# faster to load; the trend rules took 21 ms of the daemon's start with the pure-Python
# loader, 3 ms with this one (tests/unit/test_yaml_list.py checks that both agree).
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def listed(text: str, key: str, what: str, error: type[Exception]) -> list[Any]:
    """The list under ``key`` of the YAML document ``text``.

    ``error`` (the caller's own exception, naming the document as ``what``) when the
    document is not a mapping with a list there; yaml.YAMLError when it is no YAML.
    """
    doc = yaml.load(text, Loader=SAFE_LOADER) or {}
    raws = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(raws, list):
        raise error(f"{what}: the document needs a list under {key!r}")
    return raws
