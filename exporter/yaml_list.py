"""The list under one key of a YAML document: how the packaged registries are written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


def listed(text: str, key: str, what: str, error: type[Exception]) -> list[Any]:
    """The list under ``key`` of the YAML document ``text``.

    ``error`` (the caller's own exception, naming the document as ``what``) when the
    document is not a mapping with a list there; yaml.YAMLError when it is no YAML.
    """
    doc = yaml.safe_load(text) or {}
    raws = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(raws, list):
        raise error(f"{what}: the document needs a list under {key!r}")
    return raws
