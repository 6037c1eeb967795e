"""The workload source's API listings through the one client: what each failure is counted as.

The client's reasons (timeout, bad_reply, http_403, ...) reach
``accel_workload_attribution_errors_total`` as the source has always named them
(``api_timeout``, ``api_bad_reply``, ``api_forbidden``, ...), and an auto-enabled DRA
listing outside a cluster or against a server without ``resource.k8s.io/v1`` stays
quiet.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.config.kubernetes import KubernetesConfig
from exporter.config.workload import DraConfig, K8sEnrichConfig, PodLabelsConfig, WorkloadConfig
from exporter.kube import REASONS, KubeError
from exporter.sources.api_listing import attribution_reason
from exporter.sources.workload import WorkloadSource
from exporter.sources.workload_labels import PodLabelRefresher
from tests.fakes.kube_api import FakeApiPod, FakeApiServer
from tests.helpers.pki import make_pki

KEYS = ["team"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


@pytest.fixture
def api(pki: Path):
    with FakeApiServer(pki, token="t0ken") as server:
        server.pods = [FakeApiPod("ml", "train-0", "node-a", {"team": "vision"})]
        yield server


def kube(api: FakeApiServer, pki: Path, tmp_path: Path) -> KubernetesConfig:
    token = tmp_path / "token"
    token.write_text("t0ken")
    return KubernetesConfig(
        api_server=api.url, node_name="node-a", token_file=str(token), ca_file=str(pki / "ca.pem")
    )


def refresh(refresher: PodLabelRefresher) -> None:
    asyncio.run(refresher.refresh())


def test_every_client_reason_has_its_attribution_name():
    names = {reason: attribution_reason(KubeError(reason, "x")) for reason in REASONS}
    assert names == {
        "not_configured": "api_not_configured",
        "token_unreadable": "api_token_unreadable",
        "tls_error": "api_tls_error",
        "timeout": "api_timeout",
        "unreachable": "api_connect_failed",
        "bad_reply": "api_bad_reply",
        "reply_too_large": "api_reply_too_large",
        "dra_not_served": "dra_not_served",
    }
    http = {code: attribution_reason(KubeError(code, "x")) for code in ("http_401", "http_403")}
    assert http == {"http_401": "api_unauthorized", "http_403": "api_forbidden"}
    for other in ("http_302", "http_404", "http_500"):
        assert attribution_reason(KubeError(other, "x")) == "api_http_error"


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda api: setattr(api, "trickle", 0.1), "api_timeout"),
        (lambda api: setattr(api, "hang_after_tls", True), "api_timeout"),
        (lambda api: api.wrong_kind.add("/api/v1/pods"), "api_bad_reply"),
        (lambda api: api.garbage_for.add("GET"), "api_bad_reply"),
        (lambda api: setattr(api, "status", 403), "api_forbidden"),
        (lambda api: setattr(api, "status", 401), "api_unauthorized"),
    ],
)
def test_pod_listing_failures_are_counted_by_their_old_names(api, pki, tmp_path, setup, reason):
    setup(api)
    counted: Counter[str] = Counter()
    config = PodLabelsConfig(enabled=True, keys=KEYS, timeout=0.5)
    refresher = PodLabelRefresher("workload", config, counted, kube=kube(api, pki, tmp_path))
    refresh(refresher)
    assert counted == {reason: 1}
    status = refresher.status()
    assert status["k8s_pod_labels"].startswith(f"failing: {reason}: ")
    assert status["k8s_pod_labels_requests"] == {"GET": 1}


def test_a_listing_that_works_counts_its_requests(api, pki, tmp_path):
    counted: Counter[str] = Counter()
    config = PodLabelsConfig(enabled=True, keys=KEYS)
    refresher = PodLabelRefresher("workload", config, counted, kube=kube(api, pki, tmp_path))
    for _ in range(2):
        refresh(refresher)
    assert counted == {} and refresher.readings([("ml", "train-0")])
    assert refresher.status()["k8s_pod_labels"] == "ok"
    assert refresher.status()["k8s_pod_labels_requests"] == {"GET": 2}


def dra_source(kube_config: KubernetesConfig, enabled: bool | str, env: dict[str, str]):
    k8s = K8sEnrichConfig(socket="/nonexistent/kubelet.sock", dra=DraConfig(enabled=enabled))
    return WorkloadSource("workload", WorkloadConfig(k8s=k8s), kube_config, env=env)


def dra_state(source: WorkloadSource) -> tuple[str, int]:
    async def go() -> tuple[str, int]:
        await source.start()
        try:
            await source.wait_ready(10)
        finally:
            await source.close()
        return source.status()["k8s_dra"], sum(source._errors.values())

    return asyncio.run(go())


def test_auto_dra_outside_a_cluster_is_quiet():
    state, counted = dra_state(dra_source(KubernetesConfig(), "auto", {}))
    assert state.startswith("inactive: api_not_configured: ")
    assert "KUBERNETES_SERVICE_HOST" in state and counted == 0


def test_auto_dra_outside_a_cluster_lists_nothing_and_logs_nothing():
    # newcomer-4 F10: "auto" means "in a cluster"; every start, probe and once used to
    # log a "cannot list" line outside one.
    with capture_logs() as logs:
        source = dra_source(KubernetesConfig(), "auto", {})
        state, _ = dra_state(source)
    assert source._dra is None and state.startswith("inactive: api_not_configured: ")
    assert [e for e in logs if e.get("event") == "cannot list"] == []
    # Configured explicitly, or in a pod, it is tried (and says what is wrong).
    state, _ = dra_state(dra_source(KubernetesConfig(), "auto", {"KUBERNETES_SERVICE_HOST": "h"}))
    assert state.startswith("inactive: api_not_configured: ")
    state, counted = dra_state(dra_source(KubernetesConfig(), True, {}))
    assert state.startswith("failing: api_not_configured: ") and counted == 1


def test_auto_dra_without_the_api_is_quiet_and_required_dra_is_counted(api, pki, tmp_path):
    api.dra_served = False
    config = kube(api, pki, tmp_path)
    state, counted = dra_state(dra_source(config, "auto", {}))
    assert state.startswith("inactive: dra_not_served") and counted == 0
    state, counted = dra_state(dra_source(config, True, {}))
    assert state.startswith("failing: dra_not_served") and counted == 1
    api.dra_served = True
    api.wrong_kind.add("/apis/resource.k8s.io/")
    state, counted = dra_state(dra_source(config, "auto", {}))
    assert state.startswith("failing: api_bad_reply") and counted == 1
