"""tests/tools/helmrender behaves like Helm on the features charts use.

A toy chart written here exercises each built-in object and Helm function, so a
renderer bug cannot hide behind the real chart happening not to need a feature.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.deploy import helm_renderer

CHART_YAML = """\
apiVersion: v2
name: toy
version: 1.2.3
appVersion: "4.5"
"""

VALUES = """\
name: base
nested: {keep: 1, drop: 2, inner: {a: x}}
list: [1, 2]
port: 8080
greeting: "hello {{ .Values.name }}"
"""

HELPERS = """\
{{- define "toy.label" -}}{{ .Chart.Name }}-{{ .Release.Name }}{{- end }}
"""

TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "toy.label" . }}
  namespace: {{ .Release.Namespace }}
data:
  chart: {{ .Chart.Name }}-{{ .Chart.Version }}-{{ .Chart.AppVersion }}
  template: {{ .Template.Name }}
  basepath: {{ .Template.BasePath }}
  service: {{ .Release.Service }}
  kube: {{ .Capabilities.KubeVersion.Version }}-{{ .Capabilities.KubeVersion.Minor }}
  has-apps: {{ .Capabilities.APIVersions.Has "apps/v1" | quote }}
  has-monitor: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" | quote }}
  tpl: {{ tpl .Values.greeting . }}
  nested: {{ toJson .Values.nested | quote }}
  list: {{ toJson .Values.list | quote }}
  port-type: {{ kindOf .Values.port }}
  port-int: {{ int .Values.port | quote }}
  yaml: |
    {{- toYaml (dict "b" 2 "a" (list 1 "two")) | nindent 4 }}
  from-yaml: {{ (fromYaml "k: v").k }}
  from-yaml-error: {{ hasKey (fromYaml ":\\n- [") "Error" | quote }}
  file: {{ .Files.Get "files/one.txt" | b64enc }}
  glob: {{ range $path, $_ := .Files.Glob "files/*.txt" }}{{ $path }};{{ end }}
  lines: {{ .Files.Lines "files/one.txt" | len | quote }}
  ignored: {{ .Files.Get "files/skip.tmp" | quote }}
  lookup: {{ lookup "v1" "Pod" "ns" "x" | len | quote }}
  config: |
    {{- (.Files.Glob "files/*.txt").AsConfig | nindent 4 }}
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("toy")
    (root / "templates").mkdir()
    (root / "files").mkdir()
    (root / "Chart.yaml").write_text(CHART_YAML)
    (root / "values.yaml").write_text(VALUES)
    (root / ".helmignore").write_text("*.tmp\n")
    (root / "templates" / "_helpers.tpl").write_text(HELPERS)
    (root / "templates" / "cm.yaml").write_text(TEMPLATE)
    (root / "templates" / "NOTES.txt").write_text("release {{ .Release.Name }}\n")
    (root / "files" / "one.txt").write_text("first line\nsecond line\n")
    (root / "files" / "two.txt").write_text("2\n")
    (root / "files" / "skip.tmp").write_text("must not be visible\n")
    return root


def run(
    chart: Path, tmp_path: Path, values: str | None = None, *args: str
) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm_renderer()), "-chart", str(chart), "-name", "rel", "-namespace", "ns", *args]
    if values is not None:
        path = tmp_path / "override.yaml"
        path.write_text(values)
        cmd += ["-f", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def render(chart: Path, tmp_path: Path, values: str | None = None, *args: str) -> dict[str, str]:
    result = run(chart, tmp_path, values, *args)
    assert result.returncode == 0, result.stderr
    assert "# Source: toy/templates/cm.yaml" in result.stdout
    (doc,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    return doc["data"]  # type: ignore[no-any-return]


def test_built_in_objects_and_functions(toy, tmp_path):
    data = render(toy, tmp_path, None, "-kube-version", "1.29.4")
    assert data["chart"] == "toy-1.2.3-4.5"
    assert data["template"] == "toy/templates/cm.yaml"
    assert data["basepath"] == "toy/templates"
    assert data["service"] == "Helm"
    assert data["kube"] == "v1.29.4-29"
    assert data["has-apps"] == "true" and data["has-monitor"] == "false"
    assert data["tpl"] == "hello base"
    # Values go through JSON, as in Helm: numbers are float64.
    assert data["port-type"] == "float64" and data["port-int"] == "8080"
    assert yaml.safe_load(data["yaml"]) == {"a": [1, "two"], "b": 2}
    assert data["yaml"].startswith("a:")  # keys sorted, as sigs.k8s.io/yaml writes them
    assert data["from-yaml"] == "v" and data["from-yaml-error"] == "true"
    assert base64.b64decode(data["file"]) == b"first line\nsecond line\n"
    assert data["glob"] == "files/one.txt;files/two.txt;"
    assert data["lines"] == "2"
    assert data["ignored"] == ""  # .helmignore hides it from .Files
    assert data["lookup"] == "0"  # no cluster: empty, as in `helm template`
    assert yaml.safe_load(data["config"]) == {
        "one.txt": "first line\nsecond line\n",
        "two.txt": "2\n",
    }


def test_value_files_merge_like_helm(toy, tmp_path):
    data = render(toy, tmp_path, "nested: {drop: null, inner: {b: z}}\nlist: [3]\nname: over\n")
    assert yaml.safe_load(data["nested"]) == {"keep": 1, "inner": {"a": "x", "b": "z"}}
    assert yaml.safe_load(data["list"]) == [3]  # lists are replaced, not merged
    assert data["tpl"] == "hello over"


def test_api_versions_can_be_added(toy, tmp_path):
    data = render(toy, tmp_path, None, "-api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    assert data["has-monitor"] == "true"


def test_required_fail_and_strict(tmp_path):
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(CHART_YAML)
    (chart / "values.yaml").write_text("present: 1\n")
    template = chart / "templates" / "t.yaml"
    template.write_text('a: {{ required "give me absent" .Values.absent }}\n')
    result = run(chart, tmp_path)
    assert result.returncode == 1 and "give me absent" in result.stderr
    template.write_text('a: {{ fail "nope" }}\n')
    assert "nope" in run(chart, tmp_path).stderr
    template.write_text("a: {{ .Values.missing }}\n")
    assert run(chart, tmp_path).stdout.strip().endswith("a:")  # missing is empty, as in Helm
    strict = run(chart, tmp_path, None, "-strict")
    assert strict.returncode == 1 and 'no entry for key "missing"' in strict.stderr
    template.write_text(
        'a: {{ include "self" . }}\n{{ define "self" }}{{ include "self" . }}{{ end }}\n'
    )
    assert "exceeded depth" in run(chart, tmp_path).stderr


def test_notes(toy, tmp_path):
    result = run(toy, tmp_path, None, "-notes")
    assert result.returncode == 0 and result.stdout == "release rel\n"
    assert "release rel" not in run(toy, tmp_path).stdout


def test_env_functions_are_removed_as_in_helm(tmp_path):
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(CHART_YAML)
    (chart / "values.yaml").write_text("{}\n")
    (chart / "templates" / "t.yaml").write_text('a: {{ env "HOME" }}\n')
    result = run(chart, tmp_path)
    assert result.returncode == 1 and 'function "env" not defined' in result.stderr
