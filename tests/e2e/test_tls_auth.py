"""TLS, client certificates and basic auth on the real listener."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.request

import bcrypt
import pytest

from tests.helpers.daemon import Daemon, value
from tests.helpers.pki import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"), ("client", "scraper"))


def client_context(pki, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return ctx


def test_tls_with_basic_auth(daemon_factory, pki):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    d = daemon_factory(
        {
            "web": {
                "tls": {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server.key")},
                "basic_auth": {"users": {"prom": hashed}},
            }
        },
        scheme="https",
    )
    ctx = client_context(pki, with_cert=False)
    assert d.get("/metrics", context=ctx).status == 401
    assert d.get("/metrics", context=ctx, auth=("prom", "wrong")).status == 401
    assert d.get("/metrics", context=ctx, auth=("nobody", "s3cret")).status == 401
    resp = d.get("/metrics", context=ctx, auth=("prom", "s3cret"))
    assert resp.status == 200 and b"accel_exporter_build_info" in resp.body
    assert d.get("/status", context=ctx).status == 401
    # Probes need no credentials and reveal nothing.
    assert d.get("/healthz", context=ctx).status == 200
    # Plain HTTP on the TLS port is refused.
    plain = d.url.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain + "/metrics", timeout=5).read()
    for line in d.lines:
        assert hashed not in line and "s3cret" not in line


def test_client_certificate_required(daemon_factory, pki):
    d = daemon_factory(
        {
            "web": {
                "tls": {
                    "cert_file": str(pki / "server.pem"),
                    "key_file": str(pki / "server.key"),
                    "client_ca_file": str(pki / "ca.pem"),
                }
            }
        },
        scheme="https",
    )
    assert d.get("/metrics", context=client_context(pki, with_cert=True)).status == 200
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError, OSError)):
        d.get("/metrics", context=client_context(pki, with_cert=False))
    # A failed handshake does not hurt the next client.
    assert d.get("/healthz", context=client_context(pki, with_cert=True)).status == 200


def test_invalid_certificate_exits_2(daemon_factory, tmp_path):
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    d = Daemon(
        tmp_path,
        {
            "web": {
                "tls": {
                    "cert_file": str(tmp_path / "bad.pem"),
                    "key_file": str(tmp_path / "bad.pem"),
                }
            }
        },
    )
    with pytest.raises(RuntimeError, match="exited with 2"):
        d.start()
    assert any("web.tls: cannot load certificate or key" in line for line in d.lines)


def test_tls_keep_alive_and_a_stalled_handshake(daemon_factory, pki):
    d = daemon_factory(
        {
            "web": {
                "tls": {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server.key")},
                "header_timeout": "1s",
            }
        },
        scheme="https",
    )
    host, port = d.address
    ctx = client_context(pki, with_cert=False)
    # A handshake begun and never finished holds nothing and is closed at the header deadline.
    with socket.create_connection((host, port), timeout=20) as stalled:
        stalled.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # half a ClientHello
        # Several requests on one kept-alive TLS connection meanwhile.
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
        try:
            for path in ("/healthz", "/metrics", "/readyz"):
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                assert resp.status in (200, 503) and not resp.will_close, (path, resp.status)
        finally:
            conn.close()
        assert stalled.recv(100) == b""
    d.wait_for(
        lambda: value(d.metrics(context=ctx), "accel_exporter_http_header_timeouts_total") == 1,
        what="the stalled handshake counted",
    )
