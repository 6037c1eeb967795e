"""The chart's kubernetesHealth switch: off by default with no RBAC for it; on, the
writer's config, the token, and a ClusterRole for DeviceTaintRules and nodes/status only."""

from __future__ import annotations

from tests.helpers.deploy import by_kind, validate_manifests
from tests.integration.test_helm_chart import (
    FULLNAME,
    daemon_config,
    render,
    renderer,  # noqa: F401 (a fixture)
)

ON = {"kubernetesHealth": {"enabled": True, "taintEffect": "NoSchedule", "clearAfter": "10m"}}


def daemonsets(docs):
    return by_kind(docs)["DaemonSet"]


def test_off_by_default_no_rbac_no_token(renderer, tmp_path):  # noqa: F811
    docs = render(renderer, tmp_path, {"rbac": {"create": True}})
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(by_kind(docs))
    assert all(
        ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        for ds in daemonsets(docs)
    )
    assert daemon_config(docs, tmp_path).outputs.kubernetes.enabled is False


def test_on_writes_config_mounts_the_token_and_grants_only_what_it_writes(
    renderer,  # noqa: F811
    tmp_path,
):
    docs = render(renderer, tmp_path, ON)
    assert validate_manifests(docs) == []
    (role,) = by_kind(docs)["ClusterRole"]
    assert role["metadata"]["name"] == f"{FULLNAME}-health"
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["devicetaintrules"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    (binding,) = by_kind(docs)["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert all(
        ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
        for ds in daemonsets(docs)
    )
    writer = daemon_config(docs, tmp_path).outputs.kubernetes
    assert (writer.enabled, writer.taint_effect, writer.clear_after) == (True, "NoSchedule", 600.0)
    # rbac.create false: the writer is still configured, the RBAC is the user's.
    docs = render(renderer, tmp_path, {**ON, "rbac": {"create": False}})
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(by_kind(docs))
