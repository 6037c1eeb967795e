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


def mtls(pki, **extra):
    return {
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server.key"),
        "client_ca_file": str(pki / "ca.pem"),
        **extra,
    }


def test_client_certificate_required_except_on_the_health_probes(daemon_factory, pki):
    # The default with a CA is RequireAndVerifyClientCert: every path but the probes,
    # which a kubelet (no client certificate) must reach or it restarts the pod.
    d = daemon_factory({"web": {"tls": mtls(pki)}}, scheme="https")
    with_cert, without = client_context(pki, with_cert=True), client_context(pki, with_cert=False)
    assert d.get("/metrics", context=with_cert).status == 200
    assert d.get("/status", context=with_cert).status == 200
    for path in ("/metrics", "/status", "/"):
        resp = d.get(path, context=without)
        assert resp.status == 403 and b"client certificate" in resp.body, path
    assert d.get("/healthz", context=without).status == 200
    assert d.get("/readyz", context=without).status in (200, 503)
    d.wait_for(lambda: d.get("/readyz", context=without).status == 200, what="ready")
    # A refusal does not hurt the next client.
    assert d.get("/metrics", context=with_cert).status == 200


def test_a_certificate_from_another_ca_fails_the_handshake(daemon_factory, pki, tmp_path):
    (tmp_path / "other").mkdir()
    other = make_pki(tmp_path / "other", ("intruder", "127.0.0.1"))
    d = daemon_factory({"web": {"tls": mtls(pki)}}, scheme="https")
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(other / "intruder.pem"), str(other / "intruder.key"))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError, OSError)):
        d.get("/healthz", context=ctx)


def test_verify_client_cert_if_given(daemon_factory, pki):
    d = daemon_factory(
        {"web": {"tls": mtls(pki, client_auth_type="VerifyClientCertIfGiven")}}, scheme="https"
    )
    assert d.get("/metrics", context=client_context(pki, with_cert=False)).status == 200
    assert d.get("/metrics", context=client_context(pki, with_cert=True)).status == 200


def test_exporter_toolkit_web_config_file(daemon_factory, pki, tmp_path):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    for name in ("server.pem", "server.key", "ca.pem"):
        (tmp_path / name).write_bytes((pki / name).read_bytes())
    # Relative paths are relative to the file, as exporter-toolkit reads them.
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n"
        "  cert_file: server.pem\n"
        "  key_file: server.key\n"
        "  client_ca_file: ca.pem\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "  min_version: TLS12\n"
        f"basic_auth_users:\n  prom: '{hashed}'\n"
    )
    d = daemon_factory({"web": {"config_file": str(tmp_path / "web.yml")}}, scheme="https")
    with_cert, without = client_context(pki, with_cert=True), client_context(pki, with_cert=False)
    assert d.get("/metrics", context=without, auth=("prom", "s3cret")).status == 403
    assert d.get("/metrics", context=with_cert).status == 401
    assert d.get("/metrics", context=with_cert, auth=("prom", "s3cret")).status == 200
    assert d.get("/healthz", context=without).status == 200


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
    # Found while the config is read (config check finds it too), naming the files.
    assert any(
        f"cannot serve cert_file {tmp_path / 'bad.pem'}" in line and "not a PEM" in line
        for line in d.lines
    ), d.lines


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
