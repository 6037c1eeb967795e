"""Listing this node's pod labels from a fake API server over HTTPS (self-signed CA)."""

from __future__ import annotations

import socket

import pytest

from exporter.enrich.errors import AttributionError
from exporter.enrich.kube_api import ApiAccess, PodLabels, access, list_pod_labels, parse_pods
from tests.fakes.kube_api import FakeApiPod, FakeApiServer
from tests.helpers.pki import make_pki

KEYS = ["team", "app.kubernetes.io/name"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture
def api(pki):
    with FakeApiServer(pki, token="s3cret-token") as server:
        server.pods = [
            FakeApiPod("ml", "train-0", "node-a", {"team": "vision", "app": "x"}),
            FakeApiPod("ml", "eval-0", "node-a", {"app.kubernetes.io/name": "evaluator"}),
            FakeApiPod("ml", "elsewhere", "node-b", {"team": "nlp"}),
        ]
        yield server


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret-token\n")
    return path


def reach(api, pki, token, node="node-a", ca=None) -> ApiAccess:
    return ApiAccess(api.url, node, str(token), str(ca or pki / "ca.pem"))


def reason_of(fn) -> str:
    with pytest.raises(AttributionError) as failed:
        fn()
    return failed.value.reason


def test_lists_this_nodes_pods_with_the_allowlisted_labels(api, pki, token):
    got = list_pod_labels(reach(api, pki, token), 5.0, 1 << 20, KEYS)
    assert got == [
        PodLabels("ml", "train-0", {"team": "vision"}),
        PodLabels("ml", "eval-0", {"app.kubernetes.io/name": "evaluator"}),
    ]
    (request,) = api.requests
    assert request["path"] == "/api/v1/pods"
    assert request["query"] == {"fieldSelector": ["spec.nodeName=node-a"], "resourceVersion": ["0"]}
    assert request["Authorization"] == "Bearer s3cret-token"
    assert "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" in request["Accept"]


def test_a_server_without_metadata_lists_answers_a_pod_list(api, pki, token):
    api.metadata_only = False
    got = list_pod_labels(reach(api, pki, token), 5.0, 1 << 20, KEYS)
    assert [p.pod for p in got] == ["train-0", "eval-0"]


def test_the_token_is_read_again_for_every_request(api, pki, token):
    # The kubelet rotates bound service-account tokens in place.
    token.write_text("old-token\n")
    assert reason_of(lambda: list_pod_labels(reach(api, pki, token), 5.0, 1 << 20, KEYS)) == (
        "api_unauthorized"
    )
    token.write_text("s3cret-token\n")
    assert len(list_pod_labels(reach(api, pki, token), 5.0, 1 << 20, KEYS)) == 2


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda api: setattr(api, "status", 403), "api_forbidden"),
        (lambda api: setattr(api, "status", 500), "api_http_error"),
        (lambda api: setattr(api, "garbage", True), "api_bad_reply"),
        (lambda api: setattr(api, "padding", 200_000), "api_reply_too_large"),
        (
            lambda api: (setattr(api, "padding", 200_000), setattr(api, "chunked", True)),
            "api_reply_too_large",
        ),
        (lambda api: setattr(api, "delay", 2.0), "api_timeout"),
    ],
)
def test_failures_have_reasons(api, pki, token, setup, reason):
    setup(api)
    assert reason_of(lambda: list_pod_labels(reach(api, pki, token), 0.5, 256 << 10, KEYS)) == (
        reason
    )


def test_forbidden_says_which_rbac_is_missing(api, pki, token):
    api.status = 403
    with pytest.raises(AttributionError) as failed:
        list_pod_labels(reach(api, pki, token), 5.0, 1 << 20, KEYS)
    assert "get, list, watch on pods" in failed.value.detail


def test_tls_and_connection_failures(api, pki, other_ca, token, tmp_path):
    # A certificate the cluster CA did not sign, an unreadable CA, nobody listening.
    wrong_ca = reach(api, pki, token, ca=other_ca / "ca.pem")
    assert reason_of(lambda: list_pod_labels(wrong_ca, 5.0, 1 << 20, KEYS)) == "api_tls_error"
    no_ca = reach(api, pki, token, ca=tmp_path / "missing.crt")
    assert reason_of(lambda: list_pod_labels(no_ca, 5.0, 1 << 20, KEYS)) == "api_tls_error"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = ApiAccess(f"https://127.0.0.1:{port}", "node-a", str(token), str(pki / "ca.pem"))
    assert reason_of(lambda: list_pod_labels(closed, 5.0, 1 << 20, KEYS)) == "api_connect_failed"
    no_token = reach(api, pki, tmp_path / "no-token")
    assert reason_of(lambda: list_pod_labels(no_token, 5.0, 1 << 20, KEYS)) == (
        "api_token_unreadable"
    )


def test_in_cluster_access_from_the_environment():
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    got = access("", "", "/t", "/ca", {**env, "NODE_NAME": "node-a"})
    assert got == ApiAccess("https://10.96.0.1:443", "node-a", "/t", "/ca")
    v6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert access("", "n", "/t", "/ca", v6).url == "https://[fd00::1]:443"
    assert access("https://api.example:6443/", "n", "/t", "/ca", {}).url == (
        "https://api.example:6443"
    )
    assert reason_of(lambda: access("", "n", "/t", "/ca", {})) == "api_not_configured"
    assert reason_of(lambda: access("", "", "/t", "/ca", env)) == "api_not_configured"


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"items": 3}', b"\xff", b"[" * 100_000, b'{"items": [1, {"metadata": []}]}'],
)
def test_odd_replies_never_raise_anything_else(body):
    try:
        assert parse_pods(body, KEYS) == []
    except AttributionError as exc:
        assert exc.reason == "api_bad_reply"
