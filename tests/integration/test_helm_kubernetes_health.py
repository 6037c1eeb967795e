"""The chart's kubernetesHealth switch: off by default with no RBAC for it; on, the
writer's config, the token, and a ClusterRole for DeviceTaintRules and nodes/status only.

The chart reads the API for DRA attribution by default too (attribution.dra: a
ClusterRole of its own for resourceslices), so the writer's grants are told apart from
it by name, and the token is checked with DRA off, where the writer alone needs it."""

from __future__ import annotations

from tests.helpers.deploy import by_kind, validate_manifests
from tests.integration.test_helm_chart import (
    FULLNAME,
    daemon_config,
    render,
    renderer,  # noqa: F401 (a fixture)
)

ON = {"kubernetesHealth": {"enabled": True, "taintEffect": "NoSchedule", "clearAfter": "10m"}}
NO_DRA = {"attribution": {"dra": False}}
HEALTH = f"{FULLNAME}-health"
WRITER_RULES = [
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["devicetaintrules"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
]


def daemonsets(docs):
    found = by_kind(docs)["DaemonSet"]
    assert len(found) > 1  # one per node kind: each must agree
    return found


def tokens(docs):
    return {
        ds["spec"]["template"]["spec"]["automountServiceAccountToken"] for ds in daemonsets(docs)
    }


def named(docs, kind):
    return {d["metadata"]["name"]: d for d in by_kind(docs).get(kind, [])}


def granted(docs):
    """Every (apiGroup, resource, verb) any ClusterRole of the release grants."""
    return {
        (group, resource, verb)
        for role in by_kind(docs).get("ClusterRole", [])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_off_by_default_no_rbac_no_token(renderer, tmp_path):  # noqa: F811
    docs = render(renderer, tmp_path, {"rbac": {"create": True}})
    # The default DRA role is there; nothing of the writer's is, in it or beside it.
    assert HEALTH not in named(docs, "ClusterRole") | named(docs, "ClusterRoleBinding")
    assert not {r for _, r, _ in granted(docs)} & {"devicetaintrules", "nodes/status"}
    assert {(g, r) for g, r, _ in granted(docs)} == {("resource.k8s.io", "resourceslices")}
    assert daemon_config(docs, tmp_path).outputs.kubernetes.enabled is False
    # Without DRA nothing reads the API: no RBAC and no token at all.
    docs = render(renderer, tmp_path, {"rbac": {"create": True}, **NO_DRA})
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(by_kind(docs))
    assert tokens(docs) == {False}


def test_on_writes_config_mounts_the_token_and_grants_only_what_it_writes(
    renderer,  # noqa: F811
    tmp_path,
):
    docs = render(renderer, tmp_path, ON)
    assert validate_manifests(docs) == []
    roles = named(docs, "ClusterRole")
    assert roles[HEALTH]["rules"] == WRITER_RULES
    # The DRA role stays a read of resourceslices: the writer's grants are its own role's.
    assert [r["resources"] for r in roles[FULLNAME]["rules"]] == [["resourceslices"]]
    binding = named(docs, "ClusterRoleBinding")[HEALTH]
    assert binding["roleRef"]["name"] == HEALTH
    assert tokens(docs) == {True}
    writer = daemon_config(docs, tmp_path).outputs.kubernetes
    assert (writer.enabled, writer.taint_effect, writer.clear_after) == (True, "NoSchedule", 600.0)
    # With DRA off the writer alone needs the API: its role only, and the token still.
    docs = render(renderer, tmp_path, {**ON, **NO_DRA})
    assert list(named(docs, "ClusterRole")) == [HEALTH]
    assert list(named(docs, "ClusterRoleBinding")) == [HEALTH]
    assert tokens(docs) == {True}
    # rbac.create false: the writer is still configured, the RBAC is the user's.
    docs = render(renderer, tmp_path, {**ON, "rbac": {"create": False}})
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(by_kind(docs))
    assert tokens(docs) == {True}
    assert daemon_config(docs, tmp_path).outputs.kubernetes.enabled is True
