"""Resource attributes: detection < OTEL_RESOURCE_ATTRIBUTES < OTEL_SERVICE_NAME < config."""

from __future__ import annotations

import pytest

from exporter import __version__
from exporter.outputs.otlp_resource import parse_resource_attributes, resource_attributes


def attrs(configured=None, **env):
    return resource_attributes(configured or {}, env, hostname=lambda: "box-7")


def test_detection_outside_kubernetes():
    found, warnings = attrs()
    assert found["service.name"] == "accel-exporter"
    assert found["service.version"] == __version__
    assert found["host.name"] == "box-7"
    assert found["telemetry.sdk.language"] == "python"
    assert not any(key.startswith("k8s.") for key in found)
    assert warnings == []


def test_downward_api_names_node_pod_and_namespace():
    found, _ = attrs(
        NODE_NAME="gpu-node-3", POD_NAME="accel-exporter-abc", POD_NAMESPACE="mon", POD_UID="1234"
    )
    assert found["k8s.node.name"] == "gpu-node-3"
    assert found["k8s.pod.name"] == "accel-exporter-abc"
    assert found["k8s.namespace.name"] == "mon"
    assert found["k8s.pod.uid"] == "1234"
    # The pod's own hostname is the pod's; the accelerators belong to the node.
    assert found["host.name"] == "gpu-node-3"


def test_precedence_env_then_service_name_then_config():
    found, _ = attrs(
        {"deployment.environment.name": "prod", "k8s.cluster.name": "from-config"},
        NODE_NAME="n1",
        OTEL_RESOURCE_ATTRIBUTES="host.name=h%2C1,k8s.cluster.name=from-env,service.name=a,x=1",
        OTEL_SERVICE_NAME="b",
    )
    assert found["host.name"] == "h,1"  # the environment overrides detection
    assert found["service.name"] == "b"  # OTEL_SERVICE_NAME beats service.name in the list
    assert found["k8s.cluster.name"] == "from-config"  # explicit configuration wins
    assert found["x"] == "1"
    assert found["deployment.environment.name"] == "prod"


@pytest.mark.parametrize("text", ["a=1,broken", "a=1,=2", "a=%zz"])
def test_malformed_resource_attributes_are_discarded_whole(text):
    found, warnings = attrs(OTEL_RESOURCE_ATTRIBUTES=text)
    assert "a" not in found
    assert len(warnings) == 1 and "OTEL_RESOURCE_ATTRIBUTES" in warnings[0]


def test_parse_percent_encoding_and_spaces():
    assert parse_resource_attributes(" a = x%3Dy , b%2Cc=%E2%9C%93,,") == {"a": "x=y", "b,c": "✓"}
