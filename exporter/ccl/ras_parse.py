"""Pure parsing of RAS STATUS reports: bytes in, :class:`RasReport` or :class:`RasParseError` out.

Both formats yield the same model (``exporter.ccl.ras_model``). The format is
told by the first character: JSON reports are one object, text reports start
with the ``NCCL version`` / ``RCCL version`` banner. No I/O happens here.
"""

from __future__ import annotations

from exporter.ccl.ras_json import parse_json, repair_missing_commas
from exporter.ccl.ras_model import RasParseError, RasReport
from exporter.ccl.ras_text import parse_text

__all__ = [
    "RasParseError",
    "RasReport",
    "parse_json",
    "parse_report",
    "parse_text",
    "repair_missing_commas",
]


def decode(data: bytes | str) -> str:
    """Reports are ASCII; anything else is replaced rather than raising."""
    return data if isinstance(data, str) else data.decode("utf-8", errors="replace")


def parse_report(data: bytes | str) -> RasReport:
    """Parse a report in either format; RasParseError for anything that is not one."""
    text = decode(data)
    head = text.lstrip()
    if not head:
        raise RasParseError("empty report")
    if head.startswith("{"):
        return parse_json(text)
    return parse_text(text)
