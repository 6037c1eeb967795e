"""One release on a mixed cluster: each kind of accelerator node gets exactly one pod,
with its vendor's access, and nothing that can keep a pod from starting elsewhere.

Nodes are described by the labels and taints the vendors' operators, Node Feature
Discovery and the clouds put on them; the scheduler's rules for nodeSelector,
required node affinity (In, NotIn, Exists, DoesNotExist) and taints/tolerations are
applied to the DaemonSets the real helm renders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.deploy import (
    KIND_LABEL,
    by_kind,
    helm_binary,
    install_dry_run,
    load_docs,
    render_chart,
    validate_manifests,
)


@dataclass(frozen=True)
class Node:
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]] = field(default_factory=tuple)


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


NODES = {
    # GPU operator: GFD's label, NFD's vendor-only PCI label; GKE/AKS GPU pool taint.
    "nvidia": Node(
        {"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/pci-10de.present": "true"},
        [taint("nvidia.com/gpu", "NoSchedule", "present")],
    ),
    # NVIDIA without the GPU operator (NFD only), tainted NoExecute.
    "nvidia-nfd": Node(
        {"feature.node.kubernetes.io/pci-10de.present": "true"},
        [taint("nvidia.com/gpu", "NoExecute")],
    ),
    "amd": Node(
        {"amd.com/gpu.present": "true", "feature.node.kubernetes.io/amd-gpu": "true"},
        [taint("amd.com/gpu")],
    ),
    "gaudi": Node(
        {"feature.node.kubernetes.io/pci-1200_1da3.present": "true"},
        [taint("habana.ai/gaudi")],
    ),
    "neuron": Node(
        {"feature.node.kubernetes.io/pci-1d0f.present": "true"},
        [taint("aws.amazon.com/neuron")],
    ),
    "tpu": Node(
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"},
        [taint("google.com/tpu", "NoSchedule", "present")],
    ),
    "intel": Node(
        {"intel.feature.node.kubernetes.io/gpu": "true", "gpu.intel.com/family": "Max_Series"},
        [taint("gpu.intel.com/i915")],
    ),
    # An NVIDIA node whose CPU has an Intel iGPU: the NVIDIA pod only (it reads both).
    "nvidia+intel": Node(
        {"nvidia.com/gpu.present": "true", "intel.feature.node.kubernetes.io/gpu": "true"}
    ),
    "cpu": Node({"kubernetes.io/os": "linux"}),
}
EXPECTED = {
    "nvidia": "nvidia",
    "nvidia-nfd": "nvidia",
    "amd": "amd",
    "gaudi": "gaudi",
    "neuron": "neuron",
    "tpu": "tpu",
    "intel": "intel",
    "nvidia+intel": "nvidia",
    "cpu": None,
}


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = expr["key"], expr["operator"]
    values = expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def _tolerates(tolerations: Sequence[Mapping[str, Any]], node_taint: Mapping[str, str]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != node_taint["effect"]:
            continue
        if tol.get("operator", "Equal") == "Exists":
            if not tol.get("key") or tol["key"] == node_taint["key"]:
                return True
        elif tol.get("key") == node_taint["key"] and tol.get("value", "") == node_taint["value"]:
            return True
    return False


def schedules(pod: Mapping[str, Any], node: Node) -> bool:
    """Whether the scheduler may place (and keep) this pod on this node."""
    for key, value in (pod.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return False
    required = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required is not None:
        terms = required["nodeSelectorTerms"]
        if not any(
            all(_expression_matches(e, node.labels) for e in t.get("matchExpressions", []))
            for t in terms
        ):
            return False
    tolerations = pod.get("tolerations") or []
    return all(_tolerates(tolerations, t) for t in node.taints if t["effect"] != "PreferNoSchedule")


@pytest.fixture(scope="module")
def renderer() -> Path:
    return helm_binary()


def daemonsets(docs: list[dict[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {d["metadata"]["labels"][KIND_LABEL]: d for d in by_kind(docs)["DaemonSet"]}


def pod(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def exporter(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    (c,) = pod(ds)["containers"]
    return c


@pytest.mark.parametrize("node_name", sorted(NODES))
def test_each_node_kind_runs_exactly_its_own_pod(renderer, tmp_path, node_name):
    docs = load_docs(render_chart(renderer, tmp_path))
    landed = [k for k, ds in daemonsets(docs).items() if schedules(pod(ds), NODES[node_name])]
    expected = EXPECTED[node_name]
    assert landed == ([expected] if expected else []), landed


def test_device_access_per_vendor(renderer, tmp_path):
    sets = daemonsets(load_docs(render_chart(renderer, tmp_path)))
    env = {k: {e["name"]: e.get("value") for e in exporter(ds)["env"]} for k, ds in sets.items()}
    mounts = {k: {m["mountPath"] for m in exporter(ds)["volumeMounts"]} for k, ds in sets.items()}
    privileged = {k: exporter(ds)["securityContext"].get("privileged") for k, ds in sets.items()}
    # NVIDIA: the container toolkit injects libnvidia-ml and the device nodes it asks for.
    assert env["nvidia"]["NVIDIA_VISIBLE_DEVICES"] == "all" and privileged["nvidia"] is False
    # AMD, Gaudi, Neuron, Intel: the library opens the node's device nodes; the runtime
    # passes the ones that exist to a privileged container (as the vendors' exporters run).
    for kind in ("amd", "gaudi", "neuron", "intel"):
        sc = exporter(sets[kind])["securityContext"]
        assert sc["privileged"] is True and sc["allowPrivilegeEscalation"] is True, kind
    # The vendor library where the vendor's driver package installs it on the host.
    assert "/usr/lib/habanalabs" in mounts["gaudi"]
    assert "/opt/aws/neuron" in mounts["neuron"]
    assert env["neuron"]["ACCEL_EXPORTER_SOURCES__NEURON__HOST_ROOT"] == "/host"
    # TPU: chips are counted from the host's /dev and /sys, read-only, unprivileged.
    assert {"/host/dev", "/host/sys"} <= mounts["tpu"] and privileged["tpu"] is False
    assert env["tpu"]["ACCEL_EXPORTER_SOURCES__TPU__HOST_ROOT"] == "/host"
    assert all(
        m.get("readOnly")
        for m in exporter(sets["tpu"])["volumeMounts"]
        if m["mountPath"].startswith("/host")
    )
    # No other kind gets another vendor's host paths.
    assert not {"/usr/lib/habanalabs", "/opt/aws/neuron", "/host/dev"} & mounts["nvidia"]


def test_no_volume_can_keep_a_pod_from_starting(renderer, tmp_path):
    # A hostPath of type CharDevice, File, Socket or Directory fails the pod on a node
    # without it; only the kubelet's own directory may be required to exist.
    values = {"amd": {"rocmPath": "/opt/rocm"}, "stateHostPath": "/var/lib/accel-exporter"}
    for ds in daemonsets(load_docs(render_chart(renderer, tmp_path, values))).values():
        for volume in pod(ds)["volumes"]:
            host = volume.get("hostPath")
            if host is None:
                continue
            kind = host.get("type", "")
            if host["path"] == "/var/lib/kubelet/pod-resources":
                continue
            if host["path"] == "/opt/rocm":
                # The user named it: their ROCm installation must be there.
                assert kind == "Directory"
                continue
            assert kind == "DirectoryOrCreate", (ds["metadata"]["name"], volume)


def test_a_pool_of_its_own_takes_its_nodes_from_the_generic_kind(renderer, tmp_path):
    pool = {
        "enabled": True,
        "priority": 100,
        "nodeLabels": {"pool": "h100-mig"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "env": [{"name": "ACCEL_EXPORTER_SOURCES__NVML__PROCESSES", "value": "true"}],
    }
    docs = load_docs(render_chart(renderer, tmp_path, {"nodeKinds": {"h100-mig": pool}}))
    assert validate_manifests(docs) == []
    sets = daemonsets(docs)
    node = Node({"nvidia.com/gpu.present": "true", "pool": "h100-mig"}, [taint("nvidia.com/gpu")])
    assert [k for k, ds in sets.items() if schedules(pod(ds), node)] == ["h100-mig"]
    other = NODES["nvidia"]
    assert [k for k, ds in sets.items() if schedules(pod(ds), other)] == ["nvidia"]
    env = {e["name"]: e.get("value") for e in exporter(sets["h100-mig"])["env"]}
    assert env["ACCEL_EXPORTER_SOURCES__NVML__PROCESSES"] == "true"


def test_a_user_node_affinity_narrows_every_kind(renderer, tmp_path):
    zone = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    sets = daemonsets(load_docs(render_chart(renderer, tmp_path, {"affinity": zone})))
    amd = NODES["amd"]
    in_zone = Node({**amd.labels, "zone": "a"}, amd.taints)
    assert [k for k, ds in sets.items() if schedules(pod(ds), in_zone)] == ["amd"]
    assert not [k for k, ds in sets.items() if schedules(pod(ds), amd)]


def test_disabled_kinds_and_the_old_keys(renderer, tmp_path):
    values = {"nodeKinds": {k: {"enabled": False} for k in ("amd", "gaudi", "neuron", "intel")}}
    docs = load_docs(render_chart(renderer, tmp_path, values))
    assert sorted(daemonsets(docs)) == ["nvidia", "tpu"]
    from tests.helpers.deploy import RenderError

    for old, new in (
        ({"gpuNodeAffinity": {"labels": {"a": "b"}}}, "nodeKinds.<kind>.nodeLabels"),
        ({"amd": {"devices": True}}, "nodeKinds.amd"),
    ):
        with pytest.raises(RenderError) as refused:
            render_chart(renderer, tmp_path, old)
        assert new in str(refused.value)


@pytest.mark.parametrize("operator", [True, False], ids=["operator", "no-operator"])
def test_install_notes_name_only_what_was_rendered(renderer, tmp_path, operator):
    values = {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        # A client-only install asks no cluster: the operator's API is there only if assumed.
        "prometheusOperator": {"assumeInstalled": operator},
    }
    notes, docs = install_dry_run(renderer, tmp_path, values)
    kinds = {d["kind"] for d in docs}
    names = {d["metadata"]["name"] for d in docs}
    for ds in by_kind(docs)["DaemonSet"]:
        assert ds["metadata"]["name"] in notes
    assert ("ServiceMonitor" in kinds) is operator
    assert ("scrapes it through ServiceMonitor" in notes) is operator
    assert ("No ServiceMonitor was created" in notes) is not operator
    assert ("No PrometheusRule was created" in notes) is not operator
    # Every object the notes name by kind and name is in the manifest.
    for line in notes.splitlines():
        for word in line.split():
            if word.startswith("gpu-mon-") or word.startswith("accel-exporter-"):
                assert word.strip(".,:") in names, word
