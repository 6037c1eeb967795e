"""Pod labels through the workload source: fake kubelet + fake API server + store data."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from exporter.catalog import Kind
from exporter.config.kubernetes import KubernetesConfig
from exporter.config.workload import K8sEnrichConfig, PodLabelsConfig, WorkloadConfig
from exporter.sources.registry import catalog_for
from exporter.sources.workload import WorkloadSource
from exporter.sources.workload_labels import PodLabelRefresher
from exporter.store import Store, validate
from tests.fakes.kube_api import FakeApiPod, FakeApiServer
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.devices import info, snapshot
from tests.helpers.pki import make_pki

G0, G1 = "GPU-00000000-1111-2222-3333-444444444444", "GPU-55555555-6666-7777-8888-999999999999"
KEYS = ["team", "app.kubernetes.io/name"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def cluster(tmp_path, pki):
    token = tmp_path / "token"
    token.write_text("t0ken")
    store = Store()
    store.put(snapshot("nvml", [info("0", G0), info("1", G1)]))
    with (
        FakeKubelet(str(tmp_path / "kubelet.sock")) as kubelet,
        FakeApiServer(pki, token="t0ken") as api,
    ):
        kubelet.pods = [
            FakePod("ml", "train-0", [FakeContainer("t", {"nvidia.com/gpu": [G0]})]),
            FakePod("ml", "eval-0", [FakeContainer("e", {"nvidia.com/gpu": [G1]})]),
        ]
        api.pods = [
            FakeApiPod("ml", "train-0", "node-a", {"team": "vision", "tier": "gold"}),
            FakeApiPod("ml", "eval-0", "node-a", {"app.kubernetes.io/name": "evaluator"}),
            FakeApiPod("web", "frontend", "node-a", {"team": "web"}),  # uses no GPU
        ]
        yield store, kubelet, api, token, pki


def kube(cluster) -> KubernetesConfig:
    _, _, api, token, pki = cluster
    return KubernetesConfig(
        api_server=api.url, node_name="node-a", token_file=str(token), ca_file=str(pki / "ca.pem")
    )


def make(cluster, **pod_labels):
    store, kubelet, _, _, _ = cluster
    settings = {"enabled": True, "keys": KEYS, "interval": 0.2, "timeout": 2.0}
    labels = PodLabelsConfig(**{**settings, **pod_labels})
    k8s = K8sEnrichConfig(socket=kubelet.socket_path, interval=0.2, pod_labels=labels)
    source = WorkloadSource("workload", WorkloadConfig(k8s=k8s), kube(cluster))
    source.attach(store)
    return source


def run(source, *steps):
    """Start, wait for the first listing, then await each step(source); close."""

    async def go():
        await source.start()
        try:
            await source.wait_ready(10)
            return [await step(source) for step in steps]
        finally:
            await source.close()

    return asyncio.run(go())


async def poll(source):
    return await source.poll()


def rows(readings, name):
    return sorted(r.labels for r in readings if r.metric == name)


def errors(readings):
    return {
        r.labels[0]: r.value
        for r in readings
        if r.metric == "accel_workload_attribution_errors_total"
    }


def test_labels_of_the_pods_using_accelerators(cluster):
    source = make(cluster)
    (readings,) = run(source, poll)
    assert rows(readings, "accel_pod_labels_info") == [
        ("ml", "eval-0", "", "evaluator"),
        ("ml", "train-0", "vision", ""),
    ]
    # They fit the catalog this config exports: label_<key> in the configured order.
    from exporter.config import load_config

    config = load_config(
        None,
        {},
        {"workload.k8s.pod_labels.enabled": "true", "workload.k8s.pod_labels.keys": ",".join(KEYS)},
    )
    catalog = catalog_for(config)
    row = catalog["accel_pod_labels_info"]
    assert row.kind is Kind.INFO
    assert row.labels == ("namespace", "pod", "label_team", "label_app_kubernetes_io_name")
    good, bad = validate(readings, catalog)
    assert not bad and len(good) == len(readings)
    status = source.status()
    assert status["k8s_pod_labels"] == "ok" and status["k8s_pod_labels_pods"] == 3


def test_the_api_server_is_asked_on_its_own_interval_not_per_poll(cluster):
    _, _, api, _, _ = cluster
    source = make(cluster, interval=60.0)

    async def three_polls(source):
        for _ in range(3):
            await source.poll()
        # The ResourceSlice listing (DRA) is another request, on its own interval.
        return len([r for r in api.requests if r["path"] == "/api/v1/pods"])

    (asked,) = run(source, three_polls)
    assert asked == 1


def test_an_api_server_that_refuses_is_counted_never_raised(cluster):
    _, _, api, _, _ = cluster
    api.status = 403
    source = make(cluster)

    async def later(source):
        await asyncio.sleep(0.5)
        return await source.poll()

    first, second = run(source, poll, later)
    for readings in (first, second):
        assert rows(readings, "accel_pod_labels_info") == []
        # The rest of attribution is untouched.
        assert len(rows(readings, "accel_device_workload_info")) == 2
    assert errors(second)["api_forbidden"] >= 2
    state = source.status()["k8s_pod_labels"]
    assert state.startswith("failing: api_forbidden") and "RBAC" in state


def test_the_last_answer_outlives_a_few_failures_then_goes(cluster):
    _, _, api, _, _ = cluster
    settings = make(cluster).workload.k8s.pod_labels  # interval 0.2 s: kept for 0.6 s
    now = [100.0]
    counted: Counter[str] = Counter()
    refresher = PodLabelRefresher(
        "workload", settings, counted, kube=kube(cluster), clock=lambda: now[0]
    )
    pods = [("ml", "train-0"), ("ml", "eval-0")]

    async def go():
        await refresher.refresh()
        listed = refresher.readings(pods)
        api.status = 500
        now[0] += 0.5
        await refresher.refresh()
        kept = refresher.readings(pods)
        now[0] += 0.5
        await refresher.refresh()
        return listed, kept, refresher.readings(pods)

    listed, kept, gone = asyncio.run(go())
    assert len(listed) == 2 and kept == listed
    assert gone == []
    assert counted == {"api_http_error": 2}
    assert refresher.status()["k8s_pod_labels"].startswith("failing: api_http_error")
