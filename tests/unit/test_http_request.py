"""The listener's request line and header parsing against the standard library's."""

from __future__ import annotations

import http.client
import io

import pytest

from exporter.outputs.http_request import (
    MAX_HEADERS,
    MAX_LINE,
    BadRequest,
    headers,
    request_line,
)

PROMETHEUS = (
    b"Host: 10.0.0.1:9842\r\nUser-Agent: Prometheus/2.53.0\r\n"
    b"Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n"
    b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
)


def test_a_scrape_reads_as_the_standard_library_reads_it():
    ours = headers(io.BytesIO(PROMETHEUS + b"GET /next"))
    theirs = http.client.parse_headers(io.BytesIO(PROMETHEUS))
    assert ours.items() == theirs.items()
    assert ours.get("accept-encoding") == "gzip" and ours.get("Authorization") is None


def test_repeated_folded_and_colonless_lines():
    block = b"X-A: 1\r\nx-a: 2\r\nAccept: a,\r\n  b\r\nno colon here\r\nHost:h\r\n\r\n"
    got = headers(io.BytesIO(block))
    assert got.get("X-A") == "1"  # the first of a repeated name
    assert got.get("accept") == "a, b"  # a folded line continues the one before
    assert got.get("Host") == "h" and len(got.items()) == 4


def test_header_limits_are_the_standard_librarys():
    with pytest.raises(BadRequest) as err:
        headers(io.BytesIO(b"X: " + b"a" * MAX_LINE + b"\r\n\r\n"))
    assert err.value.status == 431
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS))
    assert len(headers(io.BytesIO(many + b"\r\n")).items()) == MAX_HEADERS
    with pytest.raises(BadRequest) as err:
        headers(io.BytesIO(many + b"X-last: 1\r\n\r\n"))
    assert err.value.status == 431


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("GET /metrics", 400),  # HTTP/0.9: no status line could be written back
        ("GET", 400),
        ("GET /metrics HTTP/1.1 extra", 400),
        ("GET /metrics HTTX/1.1", 400),
        ("GET /metrics HTTP/1", 400),
        ("GET /metrics HTTP/1.²", 400),
        ("GET /metrics HTTP/12345678901.1", 400),
        ("GET /metrics HTTP/2.0", 505),
        ("GET /metrics HTTP/9.9", 505),
    ],
)
def test_bad_request_lines(line, status):
    with pytest.raises(BadRequest) as err:
        request_line(line)
    assert err.value.status == status


def test_good_request_lines():
    assert request_line("") is None and request_line("   ") is None
    got = request_line("GET //metrics?name[]=x HTTP/1.1")
    assert got is not None
    assert (got.method, got.target, got.version, got.keep_alive) == (
        "GET",
        "/metrics?name[]=x",
        "HTTP/1.1",
        True,
    )
    old = request_line("HEAD / HTTP/1.0")
    assert old is not None and not old.keep_alive
