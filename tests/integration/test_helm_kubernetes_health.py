"""The chart's kubernetesHealth switch: off by default with no RBAC for it; on, the
writer's config, the token, a ClusterRole for this node's ResourceSlices, DeviceTaintRules
and nodes/status only, and the admission policy that confines each pod to its own node.

The chart reads the API for DRA attribution by default too (attribution.dra: a
ClusterRole of its own for resourceslices), so the writer's grants are told apart from
it by name, and the token is checked with DRA off, where the writer alone needs it.

The policy's CEL is evaluated (tests/helpers/admission.py, cel-python) against admission
requests built as the API server builds them: the exporter's bound service-account token
on its own node and on another, the objects its writer sends and what an attacker
holding such a token would send instead."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import pytest

from exporter.outputs.kube_health import label_value
from exporter.outputs.kube_rules import Taint, create_body, key_rule_name, our_labels
from exporter.outputs.kube_scope import Want
from exporter.outputs.kube_selector import Selector, pool_key
from tests.helpers.admission import Decision, admit
from tests.helpers.deploy import (
    KUBE_VERSIONS,
    RenderError,
    by_kind,
    lint_chart,
    load_docs,
    render_chart,
    validate_manifests,
)
from tests.integration.test_helm_chart import (
    FULLNAME,
    NAMESPACE,
    daemon_config,
    render,
    renderer,  # noqa: F401 (a fixture)
)

ON = {"kubernetesHealth": {"enabled": True, "taintEffect": "NoSchedule", "clearAfter": "10m"}}
NO_DRA = {"attribution": {"dra": False}}
HEALTH = f"{FULLNAME}-health"
WRITER_RULES = [
    # The writer resolves its devices from this node's ResourceSlices itself.
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["get", "list"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["devicetaintrules"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch"]},
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


# -- the admission policy: rendered with the writer -------------------------------------

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
EXPORTER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"


def policy_docs(docs):
    return [d for d in docs if d["kind"] in POLICY_KINDS]


def test_the_policy_renders_only_with_the_writer(renderer, tmp_path):  # noqa: F811
    assert policy_docs(render(renderer, tmp_path)) == []
    assert (
        policy_docs(render(renderer, tmp_path, {"kubernetesHealth": {"admissionPolicy": {}}})) == []
    )
    docs = render(renderer, tmp_path, ON)
    policy, binding = sorted(policy_docs(docs), key=lambda d: d["kind"])
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == HEALTH
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "paramRef" not in binding["spec"] and "matchResources" not in binding["spec"]
    # Against the 1.36 schemas (the DeviceTaintRule v1beta2 release), the first release
    # serving the policy's v1 (1.30) and the newest the schemas know.
    assert validate_manifests(policy_docs(docs), ("1.30.0", "1.36.0", KUBE_VERSIONS[-1])) == []
    # What the API server's own validation adds: messages on one line, names CEL can read.
    for validation in policy["spec"]["validations"]:
        assert validation["message"].strip() and "\n" not in validation["message"]
    names = [v["name"] for v in policy["spec"]["variables"]]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names)
    assert len(set(names)) == len(names)
    report = lint_chart(renderer, tmp_path, ON)
    assert "0 chart(s) failed" in report and "[WARNING]" not in report, report
    # Judged: the exporter's own account only (the release's namespace and name).
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{EXPORTER}'"
    own_account = {**ON, "serviceAccount": {"name": "gpu-health"}}
    (policy,) = named(render(renderer, tmp_path, own_account), "ValidatingAdmissionPolicy").values()
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"].endswith(f"'system:serviceaccount:{NAMESPACE}:gpu-health'")
    # Where the user binds their own RBAC, the policy still narrows it.
    assert len(policy_docs(render(renderer, tmp_path, {**ON, "rbac": {"create": False}}))) == 2
    # Switched off for a cluster without admission policies: RBAC and writer stay.
    off = {"kubernetesHealth": {**ON["kubernetesHealth"], "admissionPolicy": {"enabled": False}}}
    docs = render(renderer, tmp_path, off)
    assert policy_docs(docs) == []
    assert named(docs, "ClusterRole")[HEALTH]["rules"] == WRITER_RULES
    warning = "kubernetesHealth is on without its admission policy"
    assert warning in render_chart(renderer, tmp_path, off, notes=True)
    assert warning not in render_chart(renderer, tmp_path, ON, notes=True)
    # A cluster older than 1.30 serves no v1 policy: the install says so, it is not dropped.
    with pytest.raises(RenderError, match=r"needs Kubernetes 1\.30 or newer.*Authority"):
        render_chart(renderer, tmp_path, ON, kube_version="1.29.0")
    assert (
        policy_docs(load_docs(render_chart(renderer, tmp_path, off, kube_version="1.29.0"))) == []
    )


@pytest.fixture(scope="module")
def policy(renderer, tmp_path_factory):  # noqa: F811
    docs = render(renderer, tmp_path_factory.mktemp("policy"), ON)
    (found,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    return found


# -- admission requests, as the API server builds them ----------------------------------

OWN, OTHER = "gpu-node-1", "gpu-node-2"
NODE_CLAIM = "authentication.kubernetes.io/node-name"
# The writer's marks on its rules (the policy's contract with it); the node label's
# value is the writer's own label_value(node): the name, or a digest of a long one.
MANAGED_BY, OURS = "app.kubernetes.io/managed-by", "accel-exporter"
NODE_LABEL = "accel-exporter.io/node"
NODE_NAME_ANNOTATION = "accel-exporter.io/node-name"
DRIVER = "gpu.nvidia.com"


def pod_user(node: str | None, username: str = EXPORTER) -> dict[str, Any]:
    """A bound service-account token's user: the pod (and, 1.30+, its node) in extra."""
    extra = {
        "authentication.kubernetes.io/credential-id": ["JTI=1b2d3c4e-0000-4000-8000-000000000001"],
        "authentication.kubernetes.io/pod-name": [f"{FULLNAME}-nvidia-x7k2p"],
        "authentication.kubernetes.io/pod-uid": ["9f0c8a62-0000-4000-8000-000000000002"],
    }
    if node is not None:
        extra[NODE_CLAIM] = [node]
        extra["authentication.kubernetes.io/node-uid"] = ["5e1d4b70-0000-4000-8000-000000000003"]
    namespace = username.split(":")[2] if username.startswith("system:serviceaccount:") else ""
    return {
        "username": username,
        "uid": "0d6f3e11-0000-4000-8000-000000000004",
        "groups": [
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ],
        "extra": extra,
    }


def request(
    user: Mapping[str, Any],
    operation: str,
    gvr: tuple[str, str, str],
    kind: str,
    name: str,
    sub: str = "",
) -> dict[str, Any]:
    """An AdmissionRequest as JSON (the CEL ``request``): empty fields left out."""
    group, version, resource = gvr
    out: dict[str, Any] = {
        "uid": "7a3c5d90-0000-4000-8000-000000000005",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "operation": operation,
        "userInfo": {k: v for k, v in user.items() if v},
        "dryRun": False,
    }
    if sub:
        out["subResource"] = out["requestSubResource"] = sub
    return out


def node(name: str) -> dict[str, Any]:
    """A GPU Node as the API server holds it (kubelet's status, managed fields)."""
    stamp = "2026-05-01T10:00:00Z"
    conditions = [
        {"type": t, "status": "False", "reason": f"Kubelet{r}", "message": m}
        for t, r, m in (
            ("MemoryPressure", "HasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "HasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "HasSufficientPID", "kubelet has sufficient PID available"),
        )
    ] + [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    ]
    for c in conditions:
        c.update(lastHeartbeatTime=stamp, lastTransitionTime="2026-04-01T08:00:00Z")
    resources = {"cpu": "96", "memory": "2113438196Ki", "nvidia.com/gpu": "8", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "c0a80001-0000-4000-8000-000000000006",
            "resourceVersion": "81234567",
            "creationTimestamp": "2026-04-01T08:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}}},
                    "subresource": "status",
                }
            ],
        },
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": f"aws:///us-east-1a/{name}"},
        "status": {
            "capacity": dict(resources),
            "allocatable": {**resources, "memory": "2113335796Ki"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.1.17"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "ec2a5b3f",
                "systemUUID": "ec2a5b3f-0000-4000-8000-000000000007",
                "bootID": "3f0d6f0e-0000-4000-8000-000000000008",
                "kernelVersion": "6.8.0-1021-aws",
                "osImage": "Ubuntu 24.04.2 LTS",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kubeletVersion": "v1.36.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {"names": ["registry.example.com/accel-exporter:0.1.0"], "sizeBytes": 81234567}
            ],
        },
    }


def accelerator_condition(status: str = "False") -> dict[str, str]:
    """The condition the writer patches in (exporter/outputs/kube_health.py)."""
    return {
        "type": "AcceleratorHealthy",
        "status": status,
        "reason": "AcceleratorUnhealthy" if status == "False" else "AcceleratorsHealthy",
        "message": "3 (GPU-5e1d4b70) failed: xid_79 -> reboot_node",
        "lastHeartbeatTime": "2026-05-01T10:00:30Z",
        "lastTransitionTime": "2026-05-01T10:00:30Z",
    }


def patched(old: Mapping[str, Any], condition: Mapping[str, str]) -> dict[str, Any]:
    """``old`` after the writer's strategic merge patch {status: {conditions: [condition]}}
    (conditions merge by type), with the field manager's entry the API server adds."""
    new = copy.deepcopy(dict(old))
    conditions = new["status"]["conditions"]
    for i, c in enumerate(conditions):
        if c["type"] == condition["type"]:
            conditions[i] = {**c, **condition}
            break
    else:
        conditions.append(dict(condition))
    new["metadata"]["managedFields"].append(
        {
            "manager": "accel-exporter",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-05-01T10:00:30Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"AcceleratorHealthy"}': {}}}},
            "subresource": "status",
        }
    )
    return new


def status_patch(user: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]):
    """A nodes/status PATCH: admission sees it as an UPDATE of the patched Node."""
    name = old["metadata"]["name"]
    return request(user, "UPDATE", ("", "v1", "nodes"), "Node", name, sub="status"), new, old


RULES = ("resource.k8s.io", "v1beta2", "devicetaintrules")


def rule(
    node_name: str,
    device: str = "gpu-3",
    *,
    pool: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A DeviceTaintRule as the writer makes it for ``node_name``, with what the API
    server adds on create; ``labels``,
    ``annotations`` and ``selector`` replace the writer's."""
    if labels is None:
        labels = {MANAGED_BY: OURS, NODE_LABEL: label_value(node_name)}
    if annotations is None:
        annotations = {
            NODE_NAME_ANNOTATION: node_name,
            "accel-exporter.io/device-uuid": "GPU-5e1d4b70",
            "accel-exporter.io/reasons": "xid_79",
        }
    if selector is None:
        selector = {"driver": DRIVER, "pool": pool or node_name, "device": device}
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": f"accel-exporter.{node_name}.gpu-5e1d4b70"[:253],
            "uid": "b7e2a4c1-0000-4000-8000-000000000009",
            "resourceVersion": "81234599",
            "creationTimestamp": "2026-05-01T10:00:30Z",
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "spec": {
            "deviceSelector": dict(selector),
            "taint": {
                "key": "accel-exporter.io/unhealthy",
                "value": "reboot_node",
                "effect": "None",
                "timeAdded": "2026-05-01T10:00:30Z",
            },
        },
    }


def set_effect(old: Mapping[str, Any], effect: str = "NoExecute") -> dict[str, Any]:
    """``old`` after the writer's merge patch of the taint and the healthy-since clock."""
    new = copy.deepcopy(dict(old))
    new["spec"]["taint"]["effect"] = effect
    new["metadata"]["annotations"]["accel-exporter.io/healthy-since"] = "2026-05-01T10:05:00Z"
    return new


def create(user, obj):
    return request(user, "CREATE", RULES, "DeviceTaintRule", obj["metadata"]["name"]), obj, None


def update(user, old, new):
    return request(user, "UPDATE", RULES, "DeviceTaintRule", old["metadata"]["name"]), new, old


def delete(user, old):
    return request(user, "DELETE", RULES, "DeviceTaintRule", old["metadata"]["name"]), None, old


def judge(policy, case) -> Decision:
    req, obj, old = case
    decision = admit(policy, req, obj, old)
    assert decision.matched, decision
    return decision


def allowed(policy, case) -> None:
    decision = judge(policy, case)
    assert decision.allowed, decision.denials


def refused(policy, case, because: str) -> None:
    decision = judge(policy, case)
    assert not decision.allowed
    assert any(because in d for d in decision.denials), decision.denials
    # A refusal is the policy's verdict, never an expression that failed to evaluate.
    assert not any(d.startswith(("expression ", "matchCondition ")) for d in decision.denials)


ME = pod_user(OWN)
NOT_OWN_NODE = "its own node only"
ONLY_OUR_CONDITION = "every other condition must stay"
REST_OF_NODE = "the rest of the status"
NOT_LABELLED = "must be labelled"
NOT_ONE_DEVICE = "must select devices of its own node only"
NOT_OWN_RULE = "only the DeviceTaintRules of its own node"
NO_CLAIM = "credentials name no node"


# -- nodes/status -----------------------------------------------------------------------


def test_own_node_may_set_its_accelerator_condition(policy):
    first = node(OWN)
    written = patched(first, accelerator_condition("False"))
    allowed(policy, status_patch(ME, first, written))  # added
    allowed(policy, status_patch(ME, written, patched(written, accelerator_condition("True"))))


def test_another_nodes_status_is_refused(policy):
    other = node(OTHER)
    refused(policy, status_patch(ME, other, patched(other, accelerator_condition())), NOT_OWN_NODE)
    # The other node's own exporter may.
    allowed(policy, status_patch(pod_user(OTHER), other, patched(other, accelerator_condition())))


def _ready_changed(n):
    n["status"]["conditions"][3].update(status="False", reason="KubeletNotReady")


def _ready_removed(n):
    del n["status"]["conditions"][3]


def _condition_added(n):
    n["status"]["conditions"].append({"type": "NetworkUnavailable", "status": "True"})


def _ours_twice(n):
    n["status"]["conditions"].append(accelerator_condition("True"))


def _capacity(n):
    n["status"]["capacity"]["nvidia.com/gpu"] = "0"


def _allocatable_removed(n):
    del n["status"]["allocatable"]


def _addresses(n):
    n["status"]["addresses"][0]["address"] = "192.0.2.1"


def _field_added(n):
    n["status"]["volumesInUse"] = ["kubernetes.io/csi/ebs.csi.aws.com^vol-0a1b"]


def _label(n):
    n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""


def _annotations_removed(n):
    del n["metadata"]["annotations"]


def _owner(n):
    n["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Namespace", "name": "doomed", "uid": "0000"}
    ]


@pytest.mark.parametrize(
    ("change", "because"),
    [
        (_ready_changed, ONLY_OUR_CONDITION),
        (_ready_removed, ONLY_OUR_CONDITION),
        (_condition_added, ONLY_OUR_CONDITION),
        (_ours_twice, ONLY_OUR_CONDITION),
        (_capacity, REST_OF_NODE),
        (_allocatable_removed, REST_OF_NODE),
        (_addresses, REST_OF_NODE),
        (_field_added, REST_OF_NODE),
        (_label, REST_OF_NODE),
        (_annotations_removed, REST_OF_NODE),
        (_owner, REST_OF_NODE),
    ],
)
def test_own_node_changing_anything_but_its_condition_is_refused(policy, change, because):
    old = node(OWN)
    new = patched(old, accelerator_condition())
    change(new)
    refused(policy, status_patch(ME, old, new), because)


# -- DeviceTaintRules -------------------------------------------------------------------


def test_own_node_may_create_raise_and_delete_its_rule(policy):
    mine = rule(OWN)
    allowed(policy, create(ME, mine))
    raised = set_effect(mine)
    allowed(policy, update(ME, mine, raised))
    allowed(policy, delete(ME, raised))


V1ALPHA3_FIELDS = {"driver": DRIVER, "pool": OWN, "device": "gpu-3", "deviceClassName": "gpu"}


@pytest.mark.parametrize(
    ("made", "because"),
    [
        # Labelled or annotated for another node, or not the writer's at all.
        pytest.param(
            rule(OWN, annotations={NODE_NAME_ANNOTATION: OTHER}), NOT_LABELLED, id="annotated-other"
        ),
        pytest.param(
            rule(OWN, labels={MANAGED_BY: OURS, NODE_LABEL: OTHER}),
            NOT_LABELLED,
            id="labelled-other",
        ),
        pytest.param(rule(OWN, annotations={}), NOT_LABELLED, id="no-annotations"),
        pytest.param(rule(OWN, labels={NODE_LABEL: OWN}), NOT_LABELLED, id="not-managed"),
        pytest.param(
            rule(OWN, labels={MANAGED_BY: "helm", NODE_LABEL: OWN}),
            NOT_LABELLED,
            id="managed-by-helm",
        ),
        pytest.param(rule(OWN, labels={MANAGED_BY: OURS}), NOT_LABELLED, id="no-node-label"),
        pytest.param(rule(OTHER), NOT_LABELLED, id="another-nodes-rule"),
        # Selectors wider than one device of this node.
        pytest.param(rule(OWN, selector={"driver": DRIVER}), NOT_ONE_DEVICE, id="driver-only"),
        pytest.param(rule(OWN, selector={"pool": OWN}), NOT_ONE_DEVICE, id="pool-only"),
        # A pool-wide rule (driver and pool, no device) for a pool that is not the node's.
        pytest.param(
            rule(OWN, selector={"driver": DRIVER, "pool": OTHER}),
            NOT_ONE_DEVICE,
            id="another-nodes-whole-pool",
        ),
        pytest.param(
            rule(OWN, selector={"driver": DRIVER, "pool": ""}), NOT_ONE_DEVICE, id="empty-pool"
        ),
        pytest.param(
            rule(OWN, selector={"driver": DRIVER, "pool": OWN, "device": ""}),
            NOT_ONE_DEVICE,
            id="empty-device",
        ),
        pytest.param(
            rule(OWN, selector={"pool": OWN, "device": "gpu-3"}), NOT_ONE_DEVICE, id="no-driver"
        ),
        pytest.param(rule(OWN, pool=OTHER), NOT_ONE_DEVICE, id="another-nodes-pool"),
        pytest.param(rule(OWN, selector={}), NOT_ONE_DEVICE, id="every-device"),
        # 1.33-1.34's v1alpha3 selector fields: nothing but driver, pool and device.
        pytest.param(rule(OWN, selector=V1ALPHA3_FIELDS), NOT_ONE_DEVICE, id="device-class-name"),
    ],
)
def test_a_rule_not_of_this_node_or_wider_than_its_device_is_refused(policy, made, because):
    refused(policy, create(ME, made), because)
    # As an update of its own rule too (the new object must be as strict).
    refused(policy, update(ME, rule(OWN), made), because)


def pool_rule(node_name: str, pool: str | None = None) -> dict[str, Any]:
    """The pool-wide rule the writer makes for a scope that is the node's whole pool,
    from its own create_body, with what the API server adds on create."""
    want = Want(
        key=pool_key(DRIVER, pool or node_name),
        selector=Selector(DRIVER, pool or node_name, ""),
        action="replace_device",
        scope="baseboard",
        culprits=("GPU-5e1d4b70",),
        covers=tuple(f"GPU-{i}" for i in range(8)),
        reasons=("afid_30",),
    )
    name = key_rule_name(node_name, want.key)
    taint = Taint("accel-exporter.io/unhealthy", "replace_device", "None")
    body = create_body(name, node_name, our_labels(node_name), want, taint)
    body["metadata"].update(uid="b7e2a4c1-0000-4000-8000-00000000000a", resourceVersion="8")
    body["spec"]["taint"]["timeAdded"] = "2026-05-01T10:00:30Z"
    return body


def test_own_node_may_create_raise_and_delete_its_whole_pool_rule(policy):
    mine = pool_rule(OWN)
    assert "device" not in mine["spec"]["deviceSelector"]
    allowed(policy, create(ME, mine))
    raised = set_effect(mine)
    allowed(policy, update(ME, mine, raised))
    allowed(policy, delete(ME, raised))
    # A device rule of the node becoming its pool's rule, and back: both its own.
    allowed(policy, update(ME, rule(OWN), mine))
    allowed(policy, update(ME, mine, rule(OWN)))


def test_a_whole_pool_rule_of_another_nodes_pool_is_refused(policy):
    # Labelled and annotated as this node's, selecting another node's pool.
    theirs_pool = pool_rule(OWN, pool=OTHER)
    refused(policy, create(ME, theirs_pool), NOT_ONE_DEVICE)
    refused(policy, update(ME, pool_rule(OWN), theirs_pool), NOT_ONE_DEVICE)
    # Another node's own pool rule: neither made, changed nor deleted from this node.
    theirs = pool_rule(OTHER)
    refused(policy, create(ME, theirs), NOT_LABELLED)
    refused(policy, update(ME, theirs, set_effect(theirs)), NOT_OWN_RULE)
    refused(policy, delete(ME, theirs), NOT_OWN_RULE)
    # The other node's token may write its own.
    allowed(policy, create(pod_user(OTHER), theirs))
    # No pool at all (every pool of the driver, on every node): refused.
    no_pool = pool_rule(OWN)
    del no_pool["spec"]["deviceSelector"]["pool"]
    refused(policy, create(ME, no_pool), NOT_ONE_DEVICE)


def test_a_rule_without_a_selector_is_refused(policy):
    made = rule(OWN)
    del made["spec"]["deviceSelector"]
    refused(policy, create(ME, made), NOT_ONE_DEVICE)


def test_another_nodes_rule_may_not_be_changed_taken_over_or_deleted(policy):
    theirs = rule(OTHER)
    refused(policy, update(ME, theirs, set_effect(theirs)), NOT_OWN_RULE)
    # Relabelled as ours: still theirs before the change.
    refused(policy, update(ME, theirs, rule(OWN)), NOT_OWN_RULE)
    refused(policy, delete(ME, theirs), NOT_OWN_RULE)
    # Someone else's rule (not the writer's) on this node's devices: not ours either.
    foreign = rule(OWN, labels={"team": "sre"})
    refused(policy, delete(ME, foreign), NOT_OWN_RULE)
    refused(policy, update(ME, foreign, rule(OWN)), NOT_OWN_RULE)
    # Ours made theirs: the new object is refused.
    refused(policy, update(ME, rule(OWN), rule(OTHER)), NOT_LABELLED)


def test_a_node_name_too_long_for_a_label_is_matched_by_its_digest(policy):
    long = "ip-10-0-1-17." + "gpu-pool-" * 6 + "us-east-1.compute.internal"
    assert len(long) > 63 and label_value(long) == hashlib.sha256(long.encode()).hexdigest()[:32]
    me = pod_user(long)
    mine = rule(long)
    allowed(policy, create(me, mine))
    allowed(policy, delete(me, mine))
    # The exact name is compared in the annotation; the label must be a digest.
    refused(
        policy,
        create(me, rule(long, labels={MANAGED_BY: OURS, NODE_LABEL: long[:63]})),
        NOT_LABELLED,
    )
    refused(
        policy, create(me, rule(long, annotations={NODE_NAME_ANNOTATION: long[:-1]})), NOT_LABELLED
    )
    allowed(policy, status_patch(me, node(long), patched(node(long), accelerator_condition())))


# -- who is judged ----------------------------------------------------------------------


def _no_extra(user):
    return {**user, "extra": {}}


def _no_node_claim(user):
    return {**user, "extra": {k: v for k, v in user["extra"].items() if k != NODE_CLAIM}}


def _two_claims(user):
    return {**user, "extra": {**user["extra"], NODE_CLAIM: [OWN, OTHER]}}


@pytest.mark.parametrize("strip", [_no_extra, _no_node_claim, _two_claims])
def test_a_token_without_a_node_claim_is_refused_everything(policy, strip):
    # A legacy Secret token (no extra at all), a token bound to no pod's node (older
    # clusters), or a claim that is not one node.
    user = strip(pod_user(OWN))
    old = node(OWN)
    refused(policy, status_patch(user, old, patched(old, accelerator_condition())), NO_CLAIM)
    refused(policy, create(user, rule(OWN)), NO_CLAIM)
    refused(policy, delete(user, rule(OWN)), NO_CLAIM)


@pytest.mark.parametrize(
    "username",
    [
        "system:node:gpu-node-2",  # the kubelet
        f"system:serviceaccount:{NAMESPACE}:other-exporter",
        f"system:serviceaccount:kube-system:{FULLNAME}",  # the same name elsewhere
        "kubernetes-admin",
    ],
)
def test_requests_of_other_users_are_not_judged(policy, username):
    user = pod_user(OTHER, username=username)
    old = node(OWN)
    for req, obj, prev in (
        status_patch(user, old, patched(old, accelerator_condition())),
        create(user, rule(OWN, selector={"driver": DRIVER})),
        delete(user, rule(OWN)),
    ):
        assert admit(policy, req, obj, prev) == Decision(matched=False, allowed=True)


def test_requests_outside_its_rules_are_not_judged(policy):
    # A Node update (not its status) or a rule's status: not what the writer is granted.
    old = node(OTHER)
    req = request(ME, "UPDATE", ("", "v1", "nodes"), "Node", OTHER)
    assert not admit(policy, req, patched(old, accelerator_condition()), old).matched
    req = request(ME, "UPDATE", RULES, "DeviceTaintRule", "x", sub="status")
    assert not admit(policy, req, rule(OTHER), rule(OTHER)).matched
    # Every version of the rule's API is judged: v1 (1.37) as v1beta2.
    theirs = rule(OTHER)
    req = request(
        ME, "DELETE", ("resource.k8s.io", "v1", "devicetaintrules"), "DeviceTaintRule", "x"
    )
    decision = admit(policy, req, None, theirs)
    assert decision.matched and not decision.allowed
