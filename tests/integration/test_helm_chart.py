"""The Helm chart, linted and rendered by the real helm (v4, pinned by scripts/test).

Every documented values combination passes ``helm lint --strict`` and renders to
manifests that validate against the Kubernetes schemas offline.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

import exporter
from exporter.config import load_config
from tests.helpers.deploy import (
    CHART,
    RULE_FILES,
    TEST_IMAGE,
    RenderError,
    by_kind,
    chart_values,
    container,
    daemonset,
    dashboards,
    env_of,
    helm_binary,
    install_dry_run,
    lint_chart,
    load_docs,
    need,
    one,
    render_chart,
    validate_manifests,
    values_schema,
)
from tests.helpers.pki import make_pki

RELEASE, NAMESPACE = "gpu-mon", "monitoring"
# The chart's node kinds, highest priority first.
KINDS = ("nvidia", "amd", "gaudi", "neuron", "tpu", "intel")
FULLNAME = "gpu-mon-accel-exporter"

EVERYTHING_ON: dict[str, Any] = {
    "serviceMonitor": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "tlsConfig": {"insecureSkipVerify": True},
        "basicAuth": {
            "username": {"name": "scrape-auth", "key": "username"},
            "password": {"name": "scrape-auth", "key": "password"},
        },
        "relabelings": [{"targetLabel": "cluster", "replacement": "gpu-a"}],
        "metricRelabelings": [
            {"sourceLabels": ["__name__"], "regex": "accel_process_.*", "action": "drop"}
        ],
    },
    "prometheusRule": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "disabledAlerts": ["AccelPowerThrottling"],
        "additionalRuleLabels": {"team": "ml-platform", "severity": "page"},
        "runbookBaseURL": "https://wiki.example.com/accel",
    },
    "dashboards": {
        "enabled": True,
        "namespace": "grafana",
        "annotations": {"grafana_folder": "Accelerators"},
    },
    "hostPID": True,
    "hostNetwork": True,
    "tls": {"enabled": True, "secretName": "accel-exporter-tls"},
    "amd": {"rocmPath": "/opt/rocm-6.4.0"},
    "cclInspector": {"hostPath": "/var/run/nccl-inspector"},
    "priorityClassName": "system-node-critical",
    "runtimeClassName": "nvidia",
    "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
    "podSecurityContext": {"supplementalGroups": [44, 109]},
    "config": {
        "sources": {
            "nvml": {"processes": True},
            "ccl_ras": {"addresses": ["localhost:28028", "localhost:28029"]},
        },
        "log": {"level": "debug"},
    },
    "extraArgs": ["--sources.host.interval=10s"],
    "extraEnv": [{"name": "ACCEL_EXPORTER_SOURCES__AMDSMI__PROCESSES", "value": "true"}],
    "extraVolumes": [{"name": "slurm", "hostPath": {"path": "/run/accel-exporter/slurm"}}],
    "extraVolumeMounts": [
        {"name": "slurm", "mountPath": "/run/accel-exporter/slurm", "readOnly": True}
    ],
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                        ]
                    }
                ]
            }
        }
    },
    "podAnnotations": {"example.com/team": "ml"},
    "podLabels": {"tier": "monitoring"},
    "commonLabels": {"cost-center": "gpu"},
    "service": {"annotations": {"prometheus.io/scrape": "true"}},
    "image": {"digest": "sha256:" + "0123456789abcdef" * 4},
}


@pytest.fixture(scope="module")
def renderer() -> Path:
    return helm_binary()


def render(
    renderer: Path, tmp_path: Path, values: Mapping[str, Any] | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    # Helm validates values against values.schema.json before rendering; so do we.
    values_schema().validate(chart_values({"image": {"repository": TEST_IMAGE}, **(values or {})}))
    return load_docs(
        render_chart(renderer, tmp_path, values, name=RELEASE, namespace=NAMESPACE, **kwargs)
    )


def pod_spec(docs: list[dict[str, Any]], kind: str = "nvidia") -> Mapping[str, Any]:
    return daemonset(docs, kind)["spec"]["template"]["spec"]


def volumes(docs: list[dict[str, Any]], kind: str = "nvidia") -> dict[str, Mapping[str, Any]]:
    return {v["name"]: v for v in pod_spec(docs, kind)["volumes"]}


def mounts(docs: list[dict[str, Any]], kind: str = "nvidia") -> dict[str, Mapping[str, Any]]:
    return {m["name"]: m for m in container(docs, kind)["volumeMounts"]}


def daemon_config(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    """The config the chart gives the daemon, loaded by the daemon's own loader.

    Files the config names inside the pod (TLS) are checked by the loader (they exist
    and make a servable pair), so they are given a real pair here and their in-pod
    paths restored after.
    """
    (config_map,) = [d for d in by_kind(docs)["ConfigMap"] if d["metadata"]["name"] == FULLNAME]
    raw = yaml.safe_load(config_map["data"]["config.yaml"])
    tls = raw.get("web", {}).get("tls") or {}
    in_pod = {}
    if "cert_file" in tls or "key_file" in tls:
        make_pki(tmp_path, ("server", "127.0.0.1"))
    for key, stand_in in (("cert_file", "server.pem"), ("key_file", "server.key")):
        if key in tls:
            in_pod[key] = tls[key]
            tls[key] = str(tmp_path / stand_in)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(str(path), env={})
    if in_pod:
        config = dataclasses.replace(
            config,
            web=dataclasses.replace(config.web, tls=dataclasses.replace(config.web.tls, **in_pod)),
        )
    return config


# -- validity -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {},
        EVERYTHING_ON,
        {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True, "alerts": False}},
        {
            "serviceAccount": {"create": False},
            "service": {"enabled": False},
            "podResources": {"enabled": False},
            "nvidia": {"enabled": False},
            "updateStrategy": {"type": "OnDelete"},
            "podSecurityContext": None,
        },
    ],
    ids=["defaults", "everything-on", "podmonitor", "minimal"],
)
def test_rendered_manifests_validate_against_kubernetes_schemas(renderer, tmp_path, values):
    report = lint_chart(renderer, tmp_path, values)
    assert "0 chart(s) failed" in report and "[WARNING]" not in report, report
    docs = render(renderer, tmp_path, values)
    assert validate_manifests(docs) == []
    for doc in docs:
        assert doc["metadata"]["name"].startswith(FULLNAME)


def test_renders_as_a_subchart(renderer, tmp_path):
    # What a parent chart passes down: its globals and the dependency condition's key.
    values = {"global": {"imageRegistry": "registry.example.com"}, "enabled": True}
    docs = render(renderer, tmp_path, values)
    assert validate_manifests(docs) == []
    assert docs == render(renderer, tmp_path)


def test_null_removes_a_default(renderer, tmp_path):
    values = {
        "podSecurityContext": None,
        "nodeKinds": {"nvidia": {"tolerations": None}},
        "attribution": {"root": False},  # else it sets runAsUser 0
    }
    docs = render(renderer, tmp_path, values)
    assert "securityContext" not in pod_spec(docs) and "tolerations" not in pod_spec(docs)
    notes = render_chart(renderer, tmp_path, values, notes=True)
    assert "Pod attribution is off" in notes


def test_defaults_create_only_the_workload(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    # The ClusterRole: read access to ResourceSlices, for DRA attribution.
    assert sorted(by_kind(docs)) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "Service",
        "ServiceAccount",
    ]
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    assert all(
        d["metadata"]["namespace"] == NAMESPACE for d in docs if d["kind"] not in cluster_scoped
    )


def test_everything_on_creates_every_object(renderer, tmp_path):
    kinds = {
        kind: len(docs) for kind, docs in by_kind(render(renderer, tmp_path, EVERYTHING_ON)).items()
    }
    assert kinds == {
        "ConfigMap": 1 + len(dashboards()),
        "DaemonSet": len(KINDS),
        "ClusterRole": 1,
        "ClusterRoleBinding": 1,
        "Service": 1,
        "ServiceAccount": 1,
        "ServiceMonitor": 1,
        "PrometheusRule": 1,
    }


def test_chart_version_and_image_follow_the_package(renderer, tmp_path):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == exporter.__version__
    assert container(render(renderer, tmp_path))["image"].endswith(":" + exporter.__version__)
    assert container(render(renderer, tmp_path, {"image": {"tag": "1.2.3"}}))["image"].endswith(
        ":1.2.3"
    )
    digest = container(render(renderer, tmp_path, EVERYTHING_ON))["image"]
    assert digest == TEST_IMAGE + "@" + EVERYTHING_ON["image"]["digest"]


def test_no_image_default_nobody_can_pull(renderer, tmp_path):
    # No registry publishes the image: without a repository the chart says how to make one.
    assert yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"] == ""
    with pytest.raises(RenderError) as refused:
        render_chart(renderer, tmp_path, {"image": {"repository": ""}})
    message = str(refused.value)
    assert "image.repository" in message and "podman build -f Containerfile" in message


# -- the DaemonSet ----------------------------------------------------------------------


def test_security_defaults(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    spec = pod_spec(docs)
    # Attribution by default: UID 0 for the root-only kubelet socket, nothing else.
    assert spec["securityContext"]["runAsNonRoot"] is False
    assert spec["securityContext"]["runAsUser"] == 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(docs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": []}
    assert spec["hostPID"] is False and spec["hostNetwork"] is False
    assert spec["automountServiceAccountToken"] is True  # DRA: ResourceSlices, read-only
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert all("hostPort" not in p for p in container(docs)["ports"])
    # Nothing writable but a small in-memory /tmp and the state directory (one host
    # directory of its own, for what a restart must not forget: stateHostPath).
    writable = [m for m in container(docs)["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/tmp", "/var/lib/accel-exporter"]
    assert volumes(docs)["tmp"]["emptyDir"]["medium"] == "Memory"
    assert volumes(docs)["state"]["hostPath"]["path"] == "/var/lib/accel-exporter"
    docs = render(renderer, tmp_path, {"stateHostPath": ""})
    writable = [m for m in container(docs)["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/tmp"]


def test_capabilities_are_added_only_when_asked(renderer, tmp_path):
    sc = container(render(renderer, tmp_path, EVERYTHING_ON))["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}


def test_node_name_from_the_downward_api_and_gpu_taints_tolerated(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    env = env_of(container(docs))
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # No effect: NoSchedule and NoExecute taints alike (the pod must also stay there).
    for kind, taints in {
        "nvidia": {"nvidia.com/gpu"},
        "amd": {"amd.com/gpu"},
        "gaudi": {"habana.ai/gaudi"},
        "neuron": {"aws.amazon.com/neuron"},
        "tpu": {"google.com/tpu"},
        "intel": {"gpu.intel.com/i915", "gpu.intel.com/xe"},
    }.items():
        tolerated = {
            (t["key"], t["operator"], t.get("effect")) for t in pod_spec(docs, kind)["tolerations"]
        }
        assert tolerated == {(key, "Exists", None) for key in taints}, kind


def test_operator_taints_are_added_to_the_gpu_tolerations(renderer, tmp_path):
    extra = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    docs = render(renderer, tmp_path, {"extraTolerations": [extra]})
    for kind in KINDS:
        tolerations = pod_spec(docs, kind)["tolerations"]
        assert tolerations[-1] == extra
    assert any(t["key"] == "nvidia.com/gpu" for t in pod_spec(docs)["tolerations"])


def node_terms(docs: list[dict[str, Any]], kind: str = "nvidia") -> list[Any]:
    affinity = pod_spec(docs, kind)["affinity"]["nodeAffinity"]
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_only_accelerator_nodes_by_default_with_an_off_switch(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    expressions = [term["matchExpressions"] for term in node_terms(docs)]
    # Any one label matches (terms are ORed); the highest kind excludes nothing.
    assert all(len(e) == 1 for e in expressions)
    keys = {e[0]["key"]: e[0] for e in expressions}
    assert keys["nvidia.com/gpu.present"] == {
        "key": "nvidia.com/gpu.present",
        "operator": "In",
        "values": ["true"],
    }
    assert "feature.node.kubernetes.io/pci-10de.present" in keys  # NFD: NVIDIA PCI vendor
    amd = {t["matchExpressions"][0]["key"] for t in node_terms(docs, "amd")}
    assert "feature.node.kubernetes.io/pci-1002.present" in amd  # NFD: AMD
    (tpu,) = node_terms(docs, "tpu")
    assert tpu["matchExpressions"][0] == {
        "key": "cloud.google.com/gke-tpu-accelerator",
        "operator": "Exists",
    }
    off = render(renderer, tmp_path, {"gpuNodeAffinity": {"enabled": False}})
    assert "affinity" not in pod_spec(off)
    # A pod affinity of the user's is kept beside the node affinity.
    pod_affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    both = render(renderer, tmp_path, {"affinity": pod_affinity})
    assert pod_spec(both)["affinity"]["podAntiAffinity"] == pod_affinity["podAntiAffinity"]
    assert node_terms(both) == node_terms(docs)


def test_pod_resources_socket_is_mounted_read_only(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    assert volumes(docs)["pod-resources"]["hostPath"] == {
        "path": "/var/lib/kubelet/pod-resources",
        "type": "Directory",
    }
    mount = mounts(docs)["pod-resources"]
    assert mount["readOnly"] is True
    # The daemon's default socket lies inside the mount.
    socket = daemon_config(docs, tmp_path).workload.k8s.socket
    assert socket.startswith(mount["mountPath"] + "/")
    assert "pod-resources" not in volumes(
        render(renderer, tmp_path, {"podResources": {"enabled": False}})
    )
    # A kubelet with another root directory (k0s): only the node side of the mount moves.
    k0s = "/var/lib/k0s/kubelet/pod-resources"
    docs = render(renderer, tmp_path, {"podResources": {"hostPath": k0s}})
    assert volumes(docs)["pod-resources"]["hostPath"] == {"path": k0s, "type": "Directory"}
    assert mounts(docs)["pod-resources"] == mount
    assert daemon_config(docs, tmp_path).workload.k8s.socket == socket


def test_host_pid_and_host_network_are_opt_in(renderer, tmp_path):
    docs = render(renderer, tmp_path, {"hostPID": True, "hostNetwork": True})
    spec = pod_spec(docs)
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    # Cluster DNS keeps working, and the port is declared on the host.
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    (port,) = container(docs)["ports"]
    assert port["hostPort"] == port["containerPort"] == 9842


def test_vendor_device_access(renderer, tmp_path):
    docs = render(renderer, tmp_path, EVERYTHING_ON)
    vols = volumes(docs, "amd")
    assert vols["rocm"]["hostPath"]["path"] == "/opt/rocm-6.4.0"
    assert mounts(docs, "amd")["rocm"] == {
        "name": "rocm",
        "mountPath": "/opt/rocm",
        "readOnly": True,
    }
    assert env_of(container(docs, "amd"))["ROCM_PATH"] == "/opt/rocm"
    assert "rocm" not in volumes(docs) and "ROCM_PATH" not in env_of(container(docs))
    assert pod_spec(docs)["runtimeClassName"] == "nvidia"
    assert pod_spec(docs)["securityContext"]["supplementalGroups"] == [44, 109]
    env = env_of(container(render(renderer, tmp_path, {"nvidia": {"enabled": False}})))
    assert "NVIDIA_VISIBLE_DEVICES" not in env


def test_probes_use_health_endpoints_on_the_metrics_port(renderer, tmp_path):
    for values, scheme in (({}, "HTTP"), (EVERYTHING_ON, "HTTPS")):
        c = container(render(renderer, tmp_path, values))
        assert [p["name"] for p in c["ports"]] == ["metrics"]
        assert c["livenessProbe"]["httpGet"] == {
            "path": "/healthz",
            "port": "metrics",
            "scheme": scheme,
        }
        assert c["readinessProbe"]["httpGet"] == {
            "path": "/readyz",
            "port": "metrics",
            "scheme": scheme,
        }


def test_resources_requests_and_memory_limit(renderer, tmp_path):
    resources = container(render(renderer, tmp_path))["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"memory"}  # no CPU limit: throttling breaks deadlines


def test_scheduling_values_reach_the_pod(renderer, tmp_path):
    docs = render(renderer, tmp_path, EVERYTHING_ON)
    spec = pod_spec(docs)
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["nodeSelector"] == EVERYTHING_ON["nodeSelector"]
    # The user's node affinity narrows the kind's: both must match, in every term.
    (theirs,) = EVERYTHING_ON["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert all(theirs in term["matchExpressions"] for term in node_terms(docs))
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    meta = daemonset(docs)["spec"]["template"]["metadata"]
    assert meta["labels"]["tier"] == "monitoring" and meta["labels"]["cost-center"] == "gpu"
    assert meta["annotations"]["example.com/team"] == "ml"


# -- the daemon's configuration ----------------------------------------------------------


def test_default_config_is_valid_for_the_daemon(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    config = daemon_config(docs, tmp_path)
    assert config.web.listen_address == ":9842"
    assert config.log.format == "json"
    args = container(docs)["args"]
    config_mount = mounts(docs)["config"]
    assert args[0] == f"--config.file={config_mount['mountPath']}/config.yaml"
    assert config_mount["readOnly"] is True


def test_user_config_merges_with_the_keys_the_chart_owns(renderer, tmp_path):
    docs = render(renderer, tmp_path, {**EVERYTHING_ON, "containerPort": 9500})
    config = daemon_config(docs, tmp_path)
    assert config.web.listen_address == ":9500"
    assert config.sources.nvml.processes is True
    assert config.sources.ccl_ras.addresses == ["localhost:28028", "localhost:28029"]
    assert config.log.level == "debug" and config.log.format == "json"
    # The inspector directory and TLS files are where the chart mounts them.
    assert config.sources.ccl_inspector.dir == "/var/run/nccl-inspector"
    assert mounts(docs)["ccl-inspector"]["mountPath"] == config.sources.ccl_inspector.dir
    tls_dir = mounts(docs)["tls"]["mountPath"]
    assert config.web.tls is not None
    assert (config.web.tls.cert_file, config.web.tls.key_file) == (
        f"{tls_dir}/tls.crt",
        f"{tls_dir}/tls.key",
    )
    assert volumes(docs)["tls"]["secret"]["secretName"] == "accel-exporter-tls"
    assert container(docs)["ports"][0]["containerPort"] == 9500
    assert container(docs)["args"][1:] == ["--sources.host.interval=10s"]


def test_expected_devices_reach_the_daemon_config(renderer, tmp_path):
    config = daemon_config(render(renderer, tmp_path), tmp_path)
    assert config.sources.nvml.expected_devices is None
    assert config.sources.amdsmi.expected_devices is None
    values = {
        "expectedDevices": {"nvidia": 8},
        "config": {"sources": {"nvml": {"processes": True}}},
        "cclInspector": {"hostPath": "/var/run/nccl-inspector"},
    }
    config = daemon_config(render(renderer, tmp_path, values), tmp_path)
    assert config.sources.nvml.expected_devices == 8
    # Merged with the user's keys of the same section and the chart's other owned keys.
    assert config.sources.nvml.processes is True
    assert config.sources.ccl_inspector.dir == "/var/run/nccl-inspector"
    assert config.sources.amdsmi.expected_devices is None
    config = daemon_config(render(renderer, tmp_path, {"expectedDevices": {"amd": 4}}), tmp_path)
    assert (config.sources.nvml.expected_devices, config.sources.amdsmi.expected_devices) == (
        None,
        4,
    )


def test_compat_values_reach_the_daemon_config(renderer, tmp_path):
    config = daemon_config(render(renderer, tmp_path), tmp_path)
    assert config.outputs.prometheus.compat == []
    assert config.outputs.prometheus.workload_labels is False
    values = {
        "compat": ["dcgm", "amd"],
        "clusterName": "prod-a",
        "workloadLabels": True,
        "config": {"outputs": {"otlp": {"enabled": False}}},
    }
    config = daemon_config(render(renderer, tmp_path, values), tmp_path)
    assert config.outputs.prometheus.compat == ["dcgm", "amd"]
    assert config.outputs.prometheus.cluster_name == "prod-a"
    assert config.outputs.prometheus.workload_labels is True


def test_a_config_change_rolls_the_pods(renderer, tmp_path):
    def checksum(values):
        return daemonset(render(renderer, tmp_path, values))["spec"]["template"]["metadata"][
            "annotations"
        ]["checksum/config"]

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"config": {"log": {"level": "debug"}}})


def test_failures_name_the_problem(renderer, tmp_path):
    # Helm checks values.schema.json first (naming the schema path it refused); the
    # templates' own checks stand behind it for a chart installed without the schema.
    cases = [
        ({"tls": {"enabled": True}}, r"'/tls/secretName'", r"tls\.enabled needs tls\.secretName"),
        (
            # The schema leaves this one to the template: helm's own message for a
            # failed "not" ("at '': 'not' failed") would tell a user nothing.
            {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
            None,
            "serviceMonitor or podMonitor, not both",
        ),
        (
            {"serviceMonitor": {"enabled": True}, "service": {"enabled": False}},
            None,
            r"serviceMonitor\.enabled needs service\.enabled",
        ),
    ]
    for values, by_schema, by_template in cases:
        with pytest.raises(RenderError, match=by_schema or by_template):
            render_chart(renderer, tmp_path, values)
        with pytest.raises(RenderError, match=by_template):
            render_chart(renderer, tmp_path, values, skip_schema=True)


# -- Prometheus Operator objects ------------------------------------------------------------


def check_monitor_endpoint(docs, endpoint, m):
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "30s" and endpoint["scrapeTimeout"] == "10s"
    assert endpoint["honorLabels"] is True
    relabel = endpoint["relabelings"]
    assert relabel[:3] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"},
        {"targetLabel": "job", "replacement": "accel-exporter"},
    ]
    # The monitor selects exactly the DaemonSet's pods (through their labels).
    selector = m["spec"]["selector"]["matchLabels"]
    pod_labels = daemonset(docs)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert m["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_service_monitor(renderer, tmp_path):
    docs = render(renderer, tmp_path, EVERYTHING_ON)
    sm = one(docs, "ServiceMonitor")
    (endpoint,) = sm["spec"]["endpoints"]
    check_monitor_endpoint(docs, endpoint, sm)
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert endpoint["basicAuth"] == EVERYTHING_ON["serviceMonitor"]["basicAuth"]
    assert "authorization" not in endpoint
    assert endpoint["relabelings"][3:] == EVERYTHING_ON["serviceMonitor"]["relabelings"]
    assert endpoint["metricRelabelings"] == EVERYTHING_ON["serviceMonitor"]["metricRelabelings"]
    service = one(docs, "Service")
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"] == sm["spec"]["selector"]["matchLabels"]


def test_pod_monitor(renderer, tmp_path):
    docs = render(
        renderer, tmp_path, {"podMonitor": {"enabled": True, "instanceFromNodeName": True}}
    )
    pm = one(docs, "PodMonitor")
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    check_monitor_endpoint(docs, endpoint, pm)
    assert endpoint["scheme"] == "http"
    assert not {"tlsConfig", "basicAuth", "authorization"} & set(endpoint)
    docs = render(
        renderer,
        tmp_path,
        {"podMonitor": {"enabled": True, "instanceFromNodeName": False, "jobLabel": ""}},
    )
    (endpoint,) = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    ]


def test_monitor_credentials_and_tls_pass_through(renderer, tmp_path):
    tls = {
        "ca": {"secret": {"name": "accel-exporter-tls", "key": "ca.crt"}},
        "serverName": "accel-exporter",
        "minVersion": "TLS12",
    }
    authorization = {"type": "Bearer", "credentials": {"name": "proxy-token", "key": "token"}}
    for kind, key, endpoints in (
        ("podMonitor", "PodMonitor", "podMetricsEndpoints"),
        ("serviceMonitor", "ServiceMonitor", "endpoints"),
    ):
        values = {
            kind: {"enabled": True, "tlsConfig": tls, "authorization": authorization},
            "tls": {"enabled": True, "secretName": "accel-exporter-tls"},
        }
        docs = render(renderer, tmp_path, values)
        assert validate_manifests(docs) == []
        (endpoint,) = one(docs, key)["spec"][endpoints]
        assert endpoint["scheme"] == "https"
        assert endpoint["tlsConfig"] == tls
        assert endpoint["authorization"] == authorization
        assert "basicAuth" not in endpoint
        # The rest of the endpoint is unchanged by the credentials.
        check_monitor_endpoint(docs, endpoint, one(docs, key))


def test_monitor_refuses_two_kinds_of_credentials(renderer, tmp_path):
    both = {
        "serviceMonitor": {
            "enabled": True,
            "basicAuth": {
                "username": {"name": "a", "key": "u"},
                "password": {"name": "a", "key": "p"},
            },
            "authorization": {"credentials": {"name": "t", "key": "token"}},
        }
    }
    with pytest.raises(RenderError, match=r"at '/serviceMonitor': 'not' failed"):
        render_chart(renderer, tmp_path, both)
    with pytest.raises(RenderError, match="basicAuth or authorization of the monitor, not both"):
        render_chart(renderer, tmp_path, both, skip_schema=True)


def shipped_groups() -> list[dict[str, Any]]:
    return [group for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]]


def test_prometheus_rule_holds_exactly_the_shipped_rules(renderer, tmp_path):
    docs = render(renderer, tmp_path, {"prometheusRule": {"enabled": True}})
    assert one(docs, "PrometheusRule")["spec"]["groups"] == shipped_groups()


def test_prometheus_rule_options(renderer, tmp_path):
    groups = one(render(renderer, tmp_path, EVERYTHING_ON), "PrometheusRule")["spec"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    shipped = {r["alert"]: r for g in shipped_groups() for r in g["rules"] if "alert" in r}
    assert set(alerts) == set(shipped) - {"AccelPowerThrottling"}
    for name, rule in alerts.items():
        # Extra labels are added; the alert's own severity is kept.
        assert rule["labels"] == {**shipped[name]["labels"], "team": "ml-platform"}
        assert rule["annotations"] == {
            **shipped[name]["annotations"],
            "runbook_url": f"https://wiki.example.com/accel#{name.lower()}",
        }
        assert rule["expr"] == shipped[name]["expr"]
    records = [r["record"] for r in rules if "record" in r]
    assert records == [r["record"] for g in shipped_groups() for r in g["rules"] if "record" in r]
    only_alerts = one(
        render(renderer, tmp_path, {"prometheusRule": {"enabled": True, "recordingRules": False}}),
        "PrometheusRule",
    )["spec"]["groups"]
    assert all("alert" in r for g in only_alerts for r in g["rules"])


def test_rendered_prometheus_rule_passes_promtool(renderer, tmp_path):
    rule = one(render(renderer, tmp_path, EVERYTHING_ON), "PrometheusRule")
    path = tmp_path / "rendered-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run(
        [need("promtool", "apt-get install prometheus"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboards_are_shipped_as_sidecar_config_maps(renderer, tmp_path):
    docs = render(renderer, tmp_path, EVERYTHING_ON)
    maps = [d for d in by_kind(docs)["ConfigMap"] if d["metadata"]["name"] != FULLNAME]
    found = {}
    for cm in maps:
        assert cm["metadata"]["namespace"] == "grafana"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "Accelerators"}
        ((key, text),) = cm["data"].items()
        found[key] = json.loads(text)
    assert found == dashboards()


POD_LABELS = {"workloadPodLabels": {"enabled": True, "keys": ["team", "app.kubernetes.io/name"]}}


RESOURCE_SLICES = {
    "apiGroups": ["resource.k8s.io"],
    "resources": ["resourceslices"],
    "verbs": ["get", "list", "watch"],
}


def test_dra_reads_resource_slices_and_nothing_else(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    assert validate_manifests(docs) == []
    assert one(docs, "ClusterRole")["rules"] == [RESOURCE_SLICES]
    assert pod_spec(docs)["automountServiceAccountToken"] is True
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    dra = daemon_config(docs, tmp_path).workload.k8s.dra
    assert dra.enabled == "auto"  # a cluster before 1.34 leaves it inactive, uncounted


def test_no_api_access_without_dra_or_pod_labels(renderer, tmp_path):
    # Pod attribution itself uses the kubelet's node-local socket: no RBAC, no token.
    off = {"attribution": {"dra": False}}
    for values in (off, {**EVERYTHING_ON, **off}, {"attribution": {"root": False}}):
        docs = render(renderer, tmp_path, values)
        assert not {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} & set(by_kind(docs))
        assert pod_spec(docs)["automountServiceAccountToken"] is False
        assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False


def test_pod_labels_add_read_access_to_pods_and_nothing_else(renderer, tmp_path):
    docs = render(renderer, tmp_path, {**POD_LABELS, "attribution": {"dra": False}})
    assert validate_manifests(docs) == []
    role = one(docs, "ClusterRole")
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    assert role["rules"] == [pods]
    both = one(render(renderer, tmp_path, POD_LABELS), "ClusterRole")
    assert both["rules"] == [RESOURCE_SLICES, pods]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    assert one(docs, "ServiceAccount")["metadata"]["name"] == FULLNAME
    # The token is mounted into the pod (the account itself keeps automount off).
    assert pod_spec(docs)["automountServiceAccountToken"] is True
    # The node name the listing filters on comes from the downward API.
    assert env_of(container(docs))["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    pod_labels = daemon_config(docs, tmp_path).workload.k8s.pod_labels
    assert pod_labels.enabled and pod_labels.keys == ["team", "app.kubernetes.io/name"]
    assert pod_labels.interval == 60.0


def test_pod_labels_with_an_existing_account_or_own_rbac(renderer, tmp_path):
    values = {**POD_LABELS, "serviceAccount": {"create": False, "name": "gpu-reader"}}
    docs = render(renderer, tmp_path, values)
    assert "ServiceAccount" not in by_kind(docs)
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["name"] == "gpu-reader"
    assert pod_spec(docs)["serviceAccountName"] == "gpu-reader"
    docs = render(renderer, tmp_path, {**POD_LABELS, "rbac": {"create": False}})
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(by_kind(docs))
    assert pod_spec(docs)["automountServiceAccountToken"] is True
    notes = render_chart(renderer, tmp_path, {**POD_LABELS, "rbac": {"create": False}}, notes=True)
    assert "get/list/watch on pods" in notes


def test_notes_render(renderer, tmp_path):
    notes = render_chart(renderer, tmp_path, None, name=RELEASE, namespace=NAMESPACE, notes=True)
    assert f"ds/{FULLNAME}-nvidia" in notes and "serviceMonitor.enabled=true" in notes
    assert all(f"{FULLNAME}-{kind}" in notes for kind in KINDS)
    assert "as UID 0 with every capability" in notes and "attribution is off" not in notes
    off = render_chart(renderer, tmp_path, {"attribution": {"root": False}}, notes=True)
    assert "Pod attribution is off" in off and "UID 0 with every" not in off
    monitor = {"serviceMonitor": {"enabled": True}, "prometheusOperator": {"assumeInstalled": True}}
    notes, docs = install_dry_run(renderer, tmp_path, monitor)
    assert "ServiceMonitor" in {d["kind"] for d in docs}
    assert "scrapes it through ServiceMonitor" in notes and "serviceMonitorSelector" in notes


@pytest.mark.parametrize(
    "client_auth", ["", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]
)
def test_probes_pass_against_a_daemon_with_the_charts_tls_settings(
    renderer, tmp_path, daemon_factory, client_auth
):
    """The kubelet's probes carry no client certificate and verify no server: they must
    pass in every TLS mode, while /metrics keeps requiring the certificate under mTLS."""
    import ssl

    from tests.helpers.pki import make_pki

    values = {"tls": {"enabled": True, "secretName": "accel-tls", "clientAuthType": client_auth}}
    docs = render(renderer, tmp_path, values)
    (config_map,) = [d for d in by_kind(docs)["ConfigMap"] if d["metadata"]["name"] == FULLNAME]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    pki = make_pki(tmp_path, ("server", "127.0.0.1"), ("client", "scraper"))
    # The Secret's keys, as the pod mounts them: tls.crt, tls.key, ca.crt.
    in_secret = {"tls.crt": "server.pem", "tls.key": "server.key", "ca.crt": "ca.pem"}
    for key, path in config["web"]["tls"].items():
        if key.endswith("_file"):
            config["web"]["tls"][key] = str(pki / in_secret[Path(path).name])
    assert ("client_ca_file" in config["web"]["tls"]) == bool(client_auth)
    config["web"].pop("listen_address")
    # The state directory, as the pod mounts it: here the test's own, not the host's.
    assert config["health"]["state_dir"] == config["sources"]["amdsmi"]["state_dir"]
    config["health"]["state_dir"] = config["sources"]["amdsmi"]["state_dir"] = str(tmp_path)
    d = daemon_factory(config, scheme="https")
    kubelet = ssl.create_default_context()
    kubelet.check_hostname = False
    kubelet.verify_mode = ssl.CERT_NONE
    spec = container(docs)
    for probe in ("livenessProbe", "readinessProbe"):
        get = spec[probe]["httpGet"]
        assert get["scheme"] == "HTTPS" and get["port"] == "metrics"
        d.wait_for(
            lambda get=get: d.get(get["path"], context=kubelet).status == 200,
            what=f"{probe} {get['path']} without a client certificate",
        )
    metrics = d.get("/metrics", context=kubelet).status
    assert metrics == (403 if client_auth == "RequireAndVerifyClientCert" else 200)


def test_basic_auth_users_come_from_a_secret_never_the_configmap(renderer, tmp_path):
    hashed = "$2b$10$" + "a" * 53
    with pytest.raises(RenderError, match="webConfigSecret"):
        render(renderer, tmp_path, {"config": {"web": {"basic_auth": {"users": {"p": hashed}}}}})
    docs = render(renderer, tmp_path, {"webConfigSecret": {"name": "scrape-web", "key": "w.yml"}})
    (config_map,) = [d for d in by_kind(docs)["ConfigMap"] if d["metadata"]["name"] == FULLNAME]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["web"]["config_file"] == "/etc/accel-exporter/web/web.yml"
    assert volumes(docs)["web-config"]["secret"] == {
        "secretName": "scrape-web",
        "items": [{"key": "w.yml", "path": "web.yml"}],
    }
    assert mounts(docs)["web-config"] == {
        "name": "web-config",
        "mountPath": "/etc/accel-exporter/web",
        "readOnly": True,
    }


def test_both_monitors_get_the_templates_message_not_a_schema_error(renderer, tmp_path):
    values = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}
    values_schema().validate(
        chart_values({"image": {"repository": TEST_IMAGE}, **(values or {})})
    )  # the schema lets the template explain
    with pytest.raises(RenderError, match="enable serviceMonitor or podMonitor, not both"):
        render(renderer, tmp_path, values)


def test_attribution_switch_runs_as_root_with_capabilities_still_dropped(renderer, tmp_path):
    default = render(renderer, tmp_path)
    assert pod_spec(default)["securityContext"]["runAsUser"] == 0
    assert pod_spec(default)["hostPID"] is False
    assert daemon_config(default, tmp_path).workload.k8s.enabled == "auto"
    docs = render(renderer, tmp_path, {"attribution": {"processes": True}})
    spec = pod_spec(docs)
    assert spec["securityContext"]["runAsUser"] == 0
    assert spec["securityContext"]["runAsNonRoot"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["hostPID"] is True
    sc = container(docs)["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    # The socket the daemon connects to lies in the chart's read-only mount.
    socket = daemon_config(docs, tmp_path).workload.k8s.socket
    assert socket.startswith(mounts(docs)["pod-resources"]["mountPath"] + "/")


def test_non_root_mode_turns_attribution_off_explicitly(renderer, tmp_path):
    for values in ({"attribution": {"root": False}}, {"podResources": {"enabled": False}}):
        docs = render(renderer, tmp_path, values)
        assert validate_manifests(docs) == []
        for kind in KINDS:
            assert "pod-resources" not in volumes(docs, kind)
        # Off in the daemon's config: no kubelet is asked, nothing counts permission_denied.
        assert daemon_config(docs, tmp_path).workload.k8s.enabled is False
    spec = pod_spec(render(renderer, tmp_path, {"attribution": {"root": False}}))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65532


def test_chart_readme_for_helm_show_readme_names_real_values():
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in ("gpuNodeAffinity", "extraTolerations", "attribution", "webConfigSecret", "tls"):
        assert f"`{key}" in readme and key in values, key
    assert values["image"]["repository"] in readme or "image.repository" in readme
    assert "podman push" in readme


def test_operator_objects_only_where_the_cluster_serves_their_api(renderer, tmp_path):
    values = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
    kinds = {"ServiceMonitor", "PrometheusRule"}
    with_api = load_docs(render_chart(renderer, tmp_path, values))
    assert kinds <= {d["kind"] for d in with_api}
    # A cluster without the Prometheus Operator: everything else installs, the CRs do not.
    without = load_docs(render_chart(renderer, tmp_path, values, operator=False))
    assert not kinds & {d["kind"] for d in without}
    assert "DaemonSet" in {d["kind"] for d in without}
    pm = {"podMonitor": {"enabled": True}}
    assert "PodMonitor" not in {
        d["kind"] for d in load_docs(render_chart(renderer, tmp_path, pm, operator=False))
    }
    # A GitOps render (helm template, no cluster to ask) says the operator is there.
    assumed = {**values, "prometheusOperator": {"assumeInstalled": True}}
    rendered = load_docs(render_chart(renderer, tmp_path, assumed, operator=False))
    assert kinds <= {d["kind"] for d in rendered}


def test_state_survives_pod_restarts_on_a_host_directory(renderer, tmp_path):
    # Every node kind's pod keeps its health findings (and, on AMD, the CPER cursor and
    # AFID counts) in one host directory, mounted at the systemd unit's StateDirectory.
    docs = render(renderer, tmp_path, {"expectedDevices": {"amd": 8}})
    config = daemon_config(docs, tmp_path)
    assert config.health.state_dir == "/var/lib/accel-exporter"
    assert config.sources.amdsmi.state_dir == "/var/lib/accel-exporter"
    assert config.sources.amdsmi.expected_devices == 8  # both owned keys kept
    for kind in KINDS:
        spec = daemonset(docs, kind)["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "state"]
        assert volume["hostPath"] == {
            "path": "/var/lib/accel-exporter",
            "type": "DirectoryOrCreate",
        }
        mounts = spec["containers"][0]["volumeMounts"]
        assert {"name": "state", "mountPath": "/var/lib/accel-exporter"} in mounts
    # Another host directory: mounted at the same place, the config unchanged.
    docs = render(renderer, tmp_path, {"stateHostPath": "/srv/accel-exporter"})
    assert volumes(docs, "gaudi")["state"]["hostPath"]["path"] == "/srv/accel-exporter"
    assert daemon_config(docs, tmp_path).health.state_dir == "/var/lib/accel-exporter"
    # The user's own health settings are kept beside the owned key.
    docs = render(renderer, tmp_path, {"config": {"health": {"event_window": "2h"}}})
    assert daemon_config(docs, tmp_path).health.event_window == 7200.0
    # Empty: nothing mounted, findings in memory only.
    docs = render(renderer, tmp_path, {"stateHostPath": ""})
    config = daemon_config(docs, tmp_path)
    assert (config.health.state_dir, config.sources.amdsmi.state_dir) == ("", "")
    assert all("state" not in volumes(docs, kind) for kind in KINDS)
    # The old AMD-only key is refused, naming its replacement.
    with pytest.raises(RenderError, match=r"amd\.stateHostPath moved to stateHostPath"):
        render_chart(renderer, tmp_path, {"amd": {"stateHostPath": "/var/lib/x"}})


def test_the_diag_directory_is_mounted_read_only_where_the_daemon_reads_it(renderer, tmp_path):
    docs = render(renderer, tmp_path)
    assert "diag" not in mounts(docs) and "diag" not in volumes(docs)
    docs = render(renderer, tmp_path, {"diag": {"hostPath": "/var/lib/accel-exporter/diag"}})
    config = daemon_config(docs, tmp_path)
    assert config.sources.diag.path == "/var/lib/accel-exporter/diag"
    assert mounts(docs)["diag"] == {
        "name": "diag",
        "mountPath": "/var/lib/accel-exporter/diag",
        "readOnly": True,
    }
    assert volumes(docs)["diag"]["hostPath"] == {
        "path": "/var/lib/accel-exporter/diag",
        "type": "DirectoryOrCreate",
    }
