"""The kustomize tree: valid manifests, and the same objects as the Helm chart's defaults."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__
from tests.helpers.deploy import (
    HASH_SUFFIX,
    KUSTOMIZE,
    REPO,
    RULE_FILES,
    dashboards,
    helm_binary,
    kustomize,
    load_docs,
    one,
    render_chart,
    validate_manifests,
)

BASE = KUSTOMIZE / "base"
KPS = KUSTOMIZE / "overlays" / "kube-prometheus-stack"
# Labels only Helm sets (they name the tool, not the application).
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
# The DRA attribution's RBAC (the chart's default attribution.dra): cluster-scoped, so no
# overlay's namespace applies to it.
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding")


def namespaces(docs: list[dict[str, Any]]) -> set[str | None]:
    """The namespaces of the namespaced documents (None for one without)."""
    return {d["metadata"].get("namespace") for d in docs if d["kind"] not in CLUSTER_SCOPED}


@pytest.fixture(scope="module")
def base_docs() -> list[dict[str, Any]]:
    return kustomize(BASE)


@pytest.fixture(scope="module")
def kps_docs() -> list[dict[str, Any]]:
    return kustomize(KPS)


def normalize(doc: dict[str, Any], *, namespace: str | None) -> dict[str, Any]:
    """A document with what legitimately differs between Helm and kustomize taken out:
    Helm's own labels, the config checksum (kustomize hashes the ConfigMap name instead),
    the name hash, and the namespace selector the chart sets for monitors in other namespaces."""
    doc = copy.deepcopy(doc)

    def clean(meta: dict[str, Any]) -> None:
        for key in HELM_ONLY_LABELS:
            meta.get("labels", {}).pop(key, None)
        meta.get("annotations", {}).pop("checksum/config", None)
        if "annotations" in meta and not meta["annotations"]:
            del meta["annotations"]
        if namespace is None:
            meta.pop("namespace", None)

    clean(doc["metadata"])
    if doc["kind"] == "ConfigMap":
        doc["metadata"]["name"] = HASH_SUFFIX.sub("", doc["metadata"]["name"])
        # Compare configuration data, not its formatting.
        doc["data"] = {
            k: (json.loads(v) if k.endswith(".json") else yaml.safe_load(v))
            for k, v in doc["data"].items()
        }
    if doc["kind"] == "DaemonSet":
        clean(doc["spec"]["template"]["metadata"])
        for volume in doc["spec"]["template"]["spec"]["volumes"]:
            if "configMap" in volume:
                volume["configMap"]["name"] = HASH_SUFFIX.sub("", volume["configMap"]["name"])
    if doc["kind"] in ("ServiceMonitor", "PodMonitor"):
        doc["spec"].pop("namespaceSelector", None)
    return doc


def keyed(docs: list[dict[str, Any]], *, namespace: str | None) -> dict[tuple[str, str], Any]:
    out = {}
    for doc in docs:
        n = normalize(doc, namespace=namespace)
        out[(n["kind"], n["metadata"]["name"])] = n
    return out


def chart(tmp_path: Path, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return load_docs(
        render_chart(helm_binary(), tmp_path, values, name="accel-exporter", namespace="monitoring")
    )


def test_base_validates(base_docs):
    assert validate_manifests(base_docs) == []
    assert sorted(d["kind"] for d in base_docs) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        *["DaemonSet"] * 6,  # one per node kind: nvidia, amd, gaudi, neuron, tpu, intel
        "Service",
        "ServiceAccount",
    ]


def test_kube_prometheus_stack_overlay_validates(kps_docs):
    assert validate_manifests(kps_docs) == []
    assert namespaces(kps_docs) == {"monitoring"}
    (binding,) = [d for d in kps_docs if d["kind"] == "ClusterRoleBinding"]
    assert {s["namespace"] for s in binding["subjects"]} == {"monitoring"}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(kps_docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_base_equals_the_chart_defaults(base_docs, tmp_path):
    assert keyed(base_docs, namespace=None) == keyed(chart(tmp_path), namespace=None)


def test_overlay_equals_the_chart_with_monitoring_enabled(kps_docs, tmp_path):
    values = {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"enabled": True},
    }
    assert keyed(kps_docs, namespace="monitoring") == keyed(
        chart(tmp_path, values), namespace="monitoring"
    )


def test_overlay_carries_the_shipped_rules_and_dashboards(kps_docs):
    groups = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    assert one(kps_docs, "PrometheusRule")["spec"]["groups"] == groups
    found = {}
    for cm in kps_docs:
        if cm["kind"] == "ConfigMap" and cm["metadata"]["labels"].get("grafana_dashboard") == "1":
            ((key, text),) = cm["data"].items()
            found[key] = json.loads(text)
    assert found == dashboards()


def test_plain_overlay_needs_no_prometheus_operator():
    docs = kustomize(KUSTOMIZE / "overlays" / "plain")
    kinds = {d["kind"] for d in docs}
    assert kinds == {"DaemonSet", "Service", "ServiceAccount", "ConfigMap", *CLUSTER_SCOPED}, kinds
    assert not [d for d in docs if "monitoring.coreos.com" in d["apiVersion"]]
    assert namespaces(docs) == {"monitoring"}


def test_the_image_is_a_placeholder_the_docs_say_how_to_replace(base_docs):
    # As the chart refuses to render without image.repository, the tree names no real
    # image: one placeholder, which docs/deploy.md's kustomize section replaces.
    images = {
        c["image"]
        for d in base_docs
        if d["kind"] == "DaemonSet"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    (image,) = images
    name, _, tag = image.rpartition(":")
    assert name.split("/")[0].endswith("example.com") and tag == __version__, image
    section = (REPO / "docs" / "deploy.md").read_text().split("\n## kustomize\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert f"kustomize edit set image {name}=" in section
