"""The one Kubernetes API client against a fake API server over HTTPS (self-signed CA).

Listing this node's pods and ResourceSlices, the token and the CA, the in-cluster
environment, and a reply checked before it is believed: not JSON, not an object,
not the kind asked for, not HTTP at all, larger than the limit. The deadline and
redirect cases against servers that misbehave on purpose are in
test_kube_deadlines.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from exporter.config.kubernetes import KubernetesConfig
from exporter.enrich.pod_labels import PodLabels, parse_pods
from exporter.kube import (
    KubeAccess,
    KubeClient,
    KubeError,
    Reply,
    check,
    list_pods,
    list_resource_slices,
    resolve_access,
)
from tests.fakes.kube_api import FakeApiPod, FakeApiServer
from tests.fakes.resource_slices import nvidia_gpu, resource_slice
from tests.helpers.pki import make_pki

KEYS = ["team", "app.kubernetes.io/name"]
RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture
def api(pki: Path):
    with FakeApiServer(pki, token="s3cret-token") as server:
        server.pods = [
            FakeApiPod("ml", "train-0", "node-a", {"team": "vision", "app": "x"}),
            FakeApiPod("ml", "eval-0", "node-a", {"app.kubernetes.io/name": "evaluator"}),
            FakeApiPod("ml", "elsewhere", "node-b", {"team": "nlp"}),
        ]
        yield server


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("s3cret-token\n")
    return path


def client_of(
    url: str,
    pki: Path,
    token: Path,
    *,
    ca: Path | None = None,
    timeout: float = 5.0,
    cap: int = 1 << 20,
) -> KubeClient:
    access = KubeAccess(url, "node-a", str(token), str(ca or pki / "ca.pem"))
    return KubeClient(access, timeout, cap)


def reason_of(fn) -> str:
    with pytest.raises(KubeError) as failed:
        fn()
    return failed.value.reason


def test_lists_this_nodes_pods_with_the_allowlisted_labels(api, pki, token):
    client = client_of(api.url, pki, token)
    got = parse_pods(list_pods(client, "node-a"), KEYS)
    assert got == [
        PodLabels("ml", "train-0", {"team": "vision"}),
        PodLabels("ml", "eval-0", {"app.kubernetes.io/name": "evaluator"}),
    ]
    (request,) = api.requests
    assert request["path"] == "/api/v1/pods"
    assert request["query"] == {"fieldSelector": ["spec.nodeName=node-a"], "resourceVersion": ["0"]}
    assert request["Authorization"] == "Bearer s3cret-token"
    assert "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" in request["Accept"]
    # One connection per request, closed: the server is told so.
    assert request["Connection"] == "close"
    assert client.stats() == {"GET": 1}


def test_a_server_without_metadata_lists_answers_a_pod_list(api, pki, token):
    api.metadata_only = False
    got = parse_pods(list_pods(client_of(api.url, pki, token), "node-a"), KEYS)
    assert [p.pod for p in got] == ["train-0", "eval-0"]


def test_resource_slices_of_this_node(api, pki, token):
    api.slices = [
        resource_slice("node-a", "gpu.nvidia.com", [nvidia_gpu(0, "GPU-a", "0000:17:00.0")]),
        resource_slice("node-b", "gpu.nvidia.com", [nvidia_gpu(0, "GPU-b", "0000:17:00.0")]),
    ]
    client = client_of(api.url, pki, token)
    (item,) = list_resource_slices(client, "node-a")
    assert item["spec"]["nodeName"] == "node-a"
    assert api.requests[-1]["query"]["fieldSelector"] == ["spec.nodeName=node-a"]
    api.dra_served = False
    assert reason_of(lambda: list_resource_slices(client, "node-a")) == "dra_not_served"


def test_the_token_is_read_again_for_every_request(api, pki, token):
    # The kubelet rotates bound service-account tokens in place.
    client = client_of(api.url, pki, token)
    token.write_text("old-token\n")
    assert reason_of(lambda: list_pods(client, "node-a")) == "http_401"
    token.write_text("s3cret-token\n")
    assert len(list_pods(client, "node-a")) == 2
    token.write_text("two\nlines\n")  # never sent as a header
    assert reason_of(lambda: list_pods(client, "node-a")) == "token_unreadable"
    assert client.stats() == {"GET": 2}  # the unreadable token sent nothing


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda api: setattr(api, "status", 403), "http_403"),
        (lambda api: setattr(api, "status", 500), "http_500"),
        (lambda api: setattr(api, "garbage", True), "bad_reply"),
        (lambda api: api.garbage_for.add("/api/v1/pods"), "bad_reply"),
        (lambda api: api.wrong_kind.add("GET"), "bad_reply"),
        (lambda api: setattr(api, "padding", 200_000), "reply_too_large"),
        (
            lambda api: (setattr(api, "padding", 200_000), setattr(api, "chunked", True)),
            "reply_too_large",
        ),
        (lambda api: setattr(api, "delay", 2.0), "timeout"),
    ],
)
def test_failures_have_reasons(api, pki, token, setup, reason):
    setup(api)
    client = client_of(api.url, pki, token, timeout=0.5, cap=256 << 10)
    assert reason_of(lambda: list_pods(client, "node-a")) == reason


def test_forbidden_says_which_rbac_is_missing(api, pki, token):
    api.status = 403
    with pytest.raises(KubeError) as failed:
        list_pods(client_of(api.url, pki, token), "node-a")
    assert failed.value.reason == "http_403"
    assert failed.value.detail.startswith("list pods: HTTP 403")
    assert "get, list, watch on pods" in failed.value.detail


def test_other_answers_are_returned_for_the_caller_to_judge(api, pki, token):
    client = client_of(api.url, pki, token)
    missing = client.request("GET", f"{RULES}/nope", kind="DeviceTaintRule")
    assert missing.status == 404 and missing.body["reason"] == "NotFound"
    with pytest.raises(KubeError) as failed:
        check(missing, "get rule")
    assert failed.value.reason == "http_404"
    assert failed.value.detail == "get rule: HTTP 404"
    status = Reply(409, {"kind": "Status", "message": "already exists"})
    with pytest.raises(KubeError, match=r"create: HTTP 409 already exists"):
        status.raise_for_status("create")
    assert Reply(201, {}).raise_for_status("create").ok


def test_replies_must_be_the_kind_asked_for(api, pki, token):
    client = client_of(api.url, pki, token)
    rule = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"},
            "taint": {"key": "k", "value": "v", "effect": "None"},
        },
    }
    created = client.request("POST", RULES, rule, kind="DeviceTaintRule")
    assert created.status == 201 and created.body["metadata"]["uid"]
    listed = client.request("GET", RULES, kind="DeviceTaintRuleList")
    assert [r["metadata"]["name"] for r in listed.body["items"]] == ["r"]
    # A server that answers 2xx with something else is not believed, whatever it did.
    api.wrong_kind.add(RULES)
    assert reason_of(lambda: client.request("GET", RULES, kind="DeviceTaintRuleList")) == (
        "bad_reply"
    )
    # One kind of several (the pod listing's two).
    api.wrong_kind.clear()
    api.garbage_for.add("PATCH")
    patch = {"spec": {"taint": {"effect": "NoSchedule"}}}
    path = f"{RULES}/r"
    assert reason_of(
        lambda: client.request("PATCH", path, patch, "application/merge-patch+json")
    ) == ("bad_reply")
    assert api.rules["r"]["spec"]["taint"]["effect"] == "None"  # garbage_for never acts
    assert client.request("GET", path, kind=("DeviceTaintRule", "Other")).status == 200
    assert client.stats() == {"POST": 1, "GET": 3, "PATCH": 1}


def test_tls_and_connection_failures(api, pki, other_ca, token, tmp_path):
    # A certificate the cluster CA did not sign, an unreadable CA, nobody listening.
    wrong_ca = client_of(api.url, pki, token, ca=other_ca / "ca.pem")
    assert reason_of(lambda: list_pods(wrong_ca, "node-a")) == "tls_error"
    no_ca = client_of(api.url, pki, token, ca=tmp_path / "missing.crt")
    assert reason_of(lambda: list_pods(no_ca, "node-a")) == "tls_error"
    # The certificate is for 127.0.0.1: another name for the same server is refused.
    port = api.url.rsplit(":", 1)[1]
    assert reason_of(
        lambda: list_pods(client_of(f"https://localhost:{port}", pki, token), "n")
    ) == ("tls_error")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    nobody = client_of(f"https://127.0.0.1:{closed}", pki, token)
    assert reason_of(lambda: list_pods(nobody, "node-a")) == "unreachable"
    no_token = client_of(api.url, pki, tmp_path / "no-token")
    assert reason_of(lambda: list_pods(no_token, "node-a")) == "token_unreadable"


def test_in_cluster_access_from_the_environment():
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = KubernetesConfig(token_file="/t", ca_file="/ca")
    got = resolve_access(config, {**env, "NODE_NAME": "node-a"})
    assert got == KubeAccess("https://10.96.0.1:443", "node-a", "/t", "/ca")
    v6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    named = KubernetesConfig(node_name="n")
    assert resolve_access(named, v6).url == "https://[fd00::1]:443"
    explicit = KubernetesConfig(api_server="https://api.example:6443/", node_name="n")
    assert resolve_access(explicit, {}).url == "https://api.example:6443"
    with pytest.raises(KubeError, match=r"kubernetes\.api_server") as failed:
        resolve_access(named, {})
    assert failed.value.reason == "not_configured"
    with pytest.raises(KubeError, match="NODE_NAME") as failed:
        resolve_access(KubernetesConfig(), env)
    assert failed.value.reason == "not_configured"
    # A node name goes into request paths: only a real one.
    with pytest.raises(KubeError, match="not a Kubernetes node name"):
        resolve_access(KubernetesConfig(), {**env, "NODE_NAME": "../../namespaces/x"})


def test_an_unconfigured_client_says_what_to_set_on_every_request(tmp_path):
    client = KubeClient.from_config(KubernetesConfig(), 1.0, env={"NODE_NAME": "node-a"})
    assert client.url == "" and client.node == "node-a"
    for _ in range(2):
        with pytest.raises(KubeError, match="KUBERNETES_SERVICE_HOST") as failed:
            client.request("GET", "/api/v1/pods")
        assert failed.value.reason == "not_configured"
    assert client.stats() == {}
    plain = KubeClient(KubeAccess("http://10.0.0.1", "n", "/t", "/ca"), 1.0)
    assert reason_of(lambda: plain.request("GET", "/api")) == "not_configured"


def test_the_proxy_variables_are_never_used(api, pki, token, monkeypatch):
    # A recording server named as every proxy: the request goes straight to the API server.
    from tests.helpers.rogue_server import RogueServer

    def answer(conn, server):
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

    with RogueServer(answer) as proxy:
        for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        assert len(list_pods(client_of(api.url, pki, token), "node-a")) == 2
        assert proxy.connections == 0 and proxy.requests == []


@pytest.mark.parametrize(
    "items",
    [[], [3, None, "x"], [{"metadata": []}], [{"metadata": {"name": "p"}}]],
)
def test_odd_items_are_skipped(items):
    assert parse_pods(items, KEYS) == []
