"""The request line and header block of one HTTP/1.x request, as the listener reads them.

The standard library's ``BaseHTTPRequestHandler.parse_request`` hands the header
block to the email package's parser: 74 us of CPU for a Prometheus scrape's five
headers, against 7 us for the line splitting here, on every keep-alive request
(docs/http.md; under eight scrapers the CPU a request holds the GIL for is what
the others queue behind). The checks and answers are the standard library's:
a line over 64 KiB or more than 100 headers ``431``, a garbled version ``400``,
HTTP/2 and later ``505``; and ours, a request line without a version (HTTP/0.9)
``400``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from http.client import HTTPMessage

# http.client's limits (_MAXLINE, _MAXHEADERS), which the standard library's server applies.
MAX_LINE = 65536
MAX_HEADERS = 100


class BadRequest(Exception):
    """A request the listener answers with ``status`` and closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class RequestLine:
    """Method, target and version of a request line; whether HTTP/1.1 keeps the connection."""

    method: str
    target: str
    version: str
    keep_alive: bool


def request_line(line: str) -> RequestLine | None:
    """The parts of ``line`` (without its CRLF); None for an empty line (closed unanswered)."""
    words = line.split()
    if not words:
        return None
    version = words[-1]
    if len(words) < 3 or not version.startswith("HTTP/"):
        if len(words) >= 3:
            raise BadRequest(400, f"Bad request version ({version!r})")
        raise BadRequest(400, "Request line needs a method, a target and a version")
    parts = version[5:].split(".")
    if len(parts) != 2 or not all(p.isdigit() and len(p) <= 10 for p in parts):
        raise BadRequest(400, f"Bad request version ({version!r})")
    try:
        number = (int(parts[0]), int(parts[1]))
    except ValueError:  # digits int() refuses (superscripts)
        raise BadRequest(400, f"Bad request version ({version!r})") from None
    if number >= (2, 0):
        raise BadRequest(505, f"Invalid HTTP version ({version[5:]})")
    if len(words) != 3:
        raise BadRequest(400, f"Bad request syntax ({line!r})")
    target = words[1]
    if target.startswith("//"):
        target = "/" + target.lstrip("/")  # as the standard library: never a scheme-relative URL
    return RequestLine(words[0], target, version, number >= (1, 1))


def headers(rfile: io.BufferedIOBase) -> HTTPMessage:
    """The header block up to its empty line, as the ``HTTPMessage`` handlers read.

    Names keep their spelling (``get`` ignores case; the first of a repeated
    name wins); a folded line continues the header before it, joined by a space
    (RFC 9112 5.2); a line without a colon is left out.
    """
    message = HTTPMessage()
    name = value = ""
    for count in range(MAX_HEADERS + 1):
        raw = rfile.readline(MAX_LINE + 1)
        if len(raw) > MAX_LINE:
            raise BadRequest(431, "Line too long")
        if raw in (b"\r\n", b"\n", b""):
            break
        if count == MAX_HEADERS:
            raise BadRequest(431, "Too many headers")
        line = raw.decode("iso-8859-1")
        if line[0] in " \t" and name:
            value = f"{value} {line.strip()}"
            continue
        if name:
            message[name] = value
        name, colon, rest = line.partition(":")
        name, value = (name.strip(), rest.strip()) if colon else ("", "")
    if name:
        message[name] = value
    return message
