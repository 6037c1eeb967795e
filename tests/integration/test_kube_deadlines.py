"""The Kubernetes client against servers that stall, trickle, lie, redirect or flood.

Each case is a named KubeError, returned within a small multiple of the client's
deadline while the server would take 20 s or more (a ratio, not a figure: the
deadline is 1 s and the assertion 3 s). A redirect is never followed and its
target never sees a connection, let alone the token.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.kube import KubeAccess, KubeClient, KubeError, list_pods
from tests.fakes.kube_api import FakeApiPod, FakeApiServer
from tests.helpers.pki import make_pki
from tests.helpers.rogue_server import RogueServer, server_tls

DEADLINE = 1.0
# A failure must come within this multiple of the deadline (servers would take 20 s+).
RATIO = 3.0
TRICKLE = 0.1  # seconds per byte: a reply of 200 bytes takes 20 s
TOKEN = "s3cret-token"
OK_LIST = b'{"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    return path


def client_of(url: str, pki: Path, token: Path, cap: int = 1 << 20) -> KubeClient:
    return KubeClient(KubeAccess(url, "node-a", str(token), str(pki / "ca.pem")), DEADLINE, cap)


def failure(fn) -> tuple[KubeError, float]:
    """The KubeError ``fn`` raised and how long it took."""
    start = time.monotonic()
    with pytest.raises(KubeError) as failed:
        fn()
    return failed.value, time.monotonic() - start


def rogue(pki: Path, script, tls: bool = True) -> RogueServer:
    return RogueServer(script, server_tls(str(pki)) if tls else None)


def https(server: RogueServer) -> str:
    return f"https://127.0.0.1:{server.port}"


def reply(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


# -- deadlines: one for the whole exchange --------------------------------------------


def test_tcp_accepted_and_tls_never_started(pki, token):
    with rogue(pki, lambda conn, server: server.hold(), tls=False) as server:
        error, took = failure(lambda: list_pods(client_of(https(server), pki, token), "node-a"))
    assert error.reason == "timeout" and "TLS handshake" in error.detail
    assert took < RATIO * DEADLINE


def test_tls_done_and_never_answered(pki, token):
    with FakeApiServer(pki, token=TOKEN) as api:
        api.hang_after_tls = True
        error, took = failure(lambda: list_pods(client_of(api.url, pki, token), "node-a"))
    assert error.reason == "timeout" and "status line" in error.detail
    assert took < RATIO * DEADLINE


def test_a_reply_trickled_a_byte_at_a_time(pki, token):
    # Each byte comes well within any per-read timeout; the whole never within the deadline.
    with FakeApiServer(pki, token=TOKEN) as api:
        api.pods = [FakeApiPod("ml", f"pod-{i}", "node-a") for i in range(3)]
        api.trickle = TRICKLE
        error, took = failure(lambda: list_pods(client_of(api.url, pki, token), "node-a"))
    assert error.reason == "timeout"
    assert took < RATIO * DEADLINE


def test_headers_fast_then_a_body_trickled(pki, token):
    def script(conn, server):
        server.read_request(conn)
        whole = reply("200 OK", OK_LIST, "Content-Type: application/json")
        split = whole.index(b"\r\n\r\n") + 4
        conn.sendall(whole[:split])
        server.trickle(conn, whole[split:] * 4, TRICKLE)  # 270 bytes: 27 s

    with rogue(pki, script) as server:
        error, took = failure(lambda: list_pods(client_of(https(server), pki, token), "node-a"))
    assert error.reason == "timeout" and "body" in error.detail
    assert took < RATIO * DEADLINE


def test_the_fake_trickles_every_reply_it_sends(pki, token):
    # The switch the writer's tests use: a listing that would take over 20 s is cut off.
    with FakeApiServer(pki, token=TOKEN) as api:
        api.trickle = TRICKLE
        client = client_of(api.url, pki, token)
        error, took = failure(lambda: client.request("GET", "/api/v1/nodes/node-a"))
    assert error.reason == "timeout" and took < RATIO * DEADLINE


# -- replies that are not HTTP, or not whole -------------------------------------------


@pytest.mark.parametrize(
    ("sent", "words"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "not an HTTP reply"),  # another protocol on the port
        (b"", "not an HTTP reply"),  # closed before the status line
        (reply("200 OK", OK_LIST)[:-20], "closed 20 bytes before the end"),
        (reply("200 OK", b'3\r\n{"k', "Transfer-Encoding: chunked"), "not an HTTP reply"),
        (reply("200 OK", b"<html>hi</html>", "Content-Type: text/html"), "not a JSON object"),
        (reply("200 OK", b"[1, 2]"), "not a JSON object"),
        (reply("200 OK", b'{"kind": "ConfigMap"}'), "not a PartialObjectMetadataList or PodList"),
        (reply("200 OK", b'{"kind": "PodList"}'), "no items list"),
    ],
)
def test_a_reply_that_is_not_the_answer_is_a_bad_reply(pki, token, sent, words):
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(sent)

    with rogue(pki, script) as server:
        error, took = failure(lambda: list_pods(client_of(https(server), pki, token), "node-a"))
    assert error.reason == "bad_reply" and words in error.detail
    assert took < RATIO * DEADLINE


# -- replies over the limit ------------------------------------------------------------


def test_a_content_length_over_the_limit_is_refused_before_reading(pki, token):
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(reply("200 OK", b"", "Content-Length: 1000000000"))
        server.hold()  # would send nothing for two minutes

    with rogue(pki, script) as server:
        error, took = failure(lambda: list_pods(client_of(https(server), pki, token), "node-a"))
    assert error.reason == "reply_too_large" and "1000000000 bytes" in error.detail
    assert took < DEADLINE  # refused at the header, not at the deadline


def test_an_endless_chunked_reply_is_cut_at_the_limit(pki, token):
    chunk = b"x" * 65536

    def script(conn, server):
        server.read_request(conn)
        conn.sendall(reply("200 OK", b"", "Transfer-Encoding: chunked"))
        while not server.stopping.is_set():
            conn.sendall(b"10000\r\n" + chunk + b"\r\n")

    with rogue(pki, script) as server:
        client = client_of(https(server), pki, token, cap=256 << 10)
        error, took = failure(lambda: list_pods(client, "node-a"))
    assert error.reason == "reply_too_large" and str(256 << 10) in error.detail
    assert took < RATIO * DEADLINE


# -- no redirect, no second server -----------------------------------------------------


def test_a_redirect_is_not_followed_and_its_target_never_sees_the_token(pki, token):
    def target_script(conn, server):
        server.read_request(conn)
        conn.sendall(reply("200 OK", OK_LIST))

    with rogue(pki, target_script) as target:

        def redirect(conn, server):
            server.read_request(conn)
            conn.sendall(reply("302 Found", b"", f"Location: {https(target)}/api/v1/pods"))

        with rogue(pki, redirect) as server:
            client = client_of(https(server), pki, token)
            error, _ = failure(lambda: list_pods(client, "node-a"))
            for method in ("DELETE", "PATCH"):
                again, _ = failure(lambda m=method: client.request(m, "/x", {"a": 1}))
                assert again.reason == "http_302"
        asked = server.requests
    assert error.reason == "http_302" and "not followed" in error.detail
    assert target.connections == 0 and target.requests == []
    assert len(asked) == 3 and all(TOKEN.encode() in head for head in asked)


def test_every_connection_is_closed_when_its_request_ends(pki, token):
    closed: list[bool] = []

    def keep_alive(conn, server):
        server.read_request(conn)
        conn.sendall(reply("200 OK", OK_LIST, "Connection: keep-alive"))
        conn.settimeout(RATIO * DEADLINE)
        closed.append(conn.recv(1) == b"")  # the client hung up, as it said it would

    with rogue(pki, keep_alive) as server:
        client = client_of(https(server), pki, token)
        for _ in range(3):
            assert list_pods(client, "node-a") == []
        deadline = time.monotonic() + RATIO * DEADLINE
        while len(closed) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert closed == [True, True, True]
    assert server.connections == 3 and client.stats() == {"GET": 3}
    assert all(b"Connection: close" in head for head in server.requests)


def test_an_api_server_behind_a_path_is_asked_under_it(pki, token):
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(reply("200 OK", OK_LIST))

    with rogue(pki, script) as server:
        client = client_of(f"{https(server)}/k8s/clusters/c-1", pki, token)
        assert list_pods(client, "node-a") == []
    (head,) = server.requests
    assert head.startswith(b"GET /k8s/clusters/c-1/api/v1/pods?fieldSelector=")
