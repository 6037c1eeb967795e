"""One result file's bytes to its run: decode, tell the suite by its keys, parse.

The suites are told apart by what only each writes (``DCGM Diagnostic`` /
``DCGM GPU Diagnostic``; AGFHC's ``program_args`` with ``test_results``; RVS's tests
of ``gpu_index`` entries; Health Validation's ``overall_severity``), never by the
file's name. What cannot be read as one is refused with its reason: ``truncated``
(the JSON stops before its end: a writer still writing, or a cut copy),
``unparseable`` (not UTF-8 or not JSON), ``unknown_format`` (JSON of no suite).

NVIDIA Health Validation's ``NodeVerdict`` is read as far as NVIDIA's documentation
of it goes (:mod:`exporter.diag.hv`): it names no version that could be pinned, so
the documented shape is what a file must have, else it is ``schema_drift``.
"""

from __future__ import annotations

import json
from typing import Any

from exporter.diag import amd, dcgm, hv
from exporter.diag.model import (
    TRUNCATED,
    UNKNOWN_FORMAT,
    UNPARSEABLE,
    DiagError,
    Run,
)

# dcgmi and NVVS may print a line before their JSON (NVIDIA's own sample starts with a
# warning line): the document starts at the first "{" or "[" within this many characters.
PREAMBLE_CHARS = 4096


def parse(data: bytes) -> Run:
    """The run one result file holds; DiagError with the reason it holds none."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DiagError(UNPARSEABLE, f"not UTF-8 at byte {exc.start}") from None
    body = text.strip()
    if not body:
        raise DiagError(TRUNCATED, "an empty file")
    found = [i for i in (body.find(c, 0, PREAMBLE_CHARS) for c in "{[") if i >= 0]
    if not found:
        raise DiagError(UNPARSEABLE, "no JSON document")
    start = min(found)
    doc = _load(body[start:])
    if not isinstance(doc, dict):
        raise DiagError(UNKNOWN_FORMAT, "the JSON is not an object")
    if dcgm.is_dcgm(doc):
        return dcgm.parse(doc)
    if amd.is_agfhc(doc):
        return amd.parse_agfhc(doc)
    if amd.is_rvs(doc):
        return amd.parse_rvs(doc)
    if hv.is_hv(doc):
        return hv.parse(doc)
    raise DiagError(UNKNOWN_FORMAT, "JSON of no suite read here")


def _load(text: str) -> Any:
    """The JSON document; an RVS log's stray closing braces forgiven (amd.rvs_text)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise DiagError(UNPARSEABLE, "nested too deep") from None
    except json.JSONDecodeError as exc:
        fixed = amd.rvs_text(text)
        if fixed != text:
            try:
                doc = json.loads(fixed)
            except (json.JSONDecodeError, RecursionError):
                pass
            else:
                if isinstance(doc, dict) and amd.is_rvs(doc):
                    return doc
        # The decoder ran out of input (or a string ran to the end): the file was cut.
        if exc.pos >= len(text) or exc.msg.startswith("Unterminated string"):
            raise DiagError(TRUNCATED, f"the JSON ends early ({exc.msg})") from None
        raise DiagError(UNPARSEABLE, f"{exc.msg} at line {exc.lineno}") from None
