"""values.schema.json accepts the chart's values and rejects bad ones with the key's path."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.helpers.deploy import CHART, chart_values, values_schema

VALIDATOR = values_schema()
CRED = {"name": "scrape-auth", "key": "token"}


def problems(over: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in VALIDATOR.iter_errors(chart_values(over))
    ]


def test_defaults_are_valid() -> None:
    assert problems({}) == []


def test_every_default_key_is_described_by_the_schema() -> None:
    # additionalProperties: false at every level the chart owns, so this walks both.
    def walk(values: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
        out = []
        if schema.get("additionalProperties") is False:
            for key, value in values.items():
                sub = schema["properties"].get(key)
                if sub is None:
                    out.append(f"{path}{key}")
                elif isinstance(value, dict):
                    out += walk(value, sub, f"{path}{key}.")
        return out

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert walk(values, VALIDATOR.schema, "") == []


@pytest.mark.parametrize(
    ("over", "where"),
    [
        ({"hostNetwrok": True}, "hostNetwrok"),
        ({"serviceMonitor": {"intervall": "30s"}}, "intervall"),
        ({"hostNetwork": "yes"}, "hostNetwork"),
        ({"serviceMonitor": {"interval": 30}}, "serviceMonitor.interval"),
        ({"serviceMonitor": {"scrapeTimeout": "10 seconds"}}, "serviceMonitor.scrapeTimeout"),
        ({"containerPort": 70000}, "containerPort"),
        ({"service": {"port": 0}}, "service.port"),
        ({"service": {"type": "ExternalName"}}, "service.type"),
        ({"image": {"pullPolicy": "always"}}, "image.pullPolicy"),
        ({"image": {"digest": "sha256:abc"}}, "image.digest"),
        ({"image": {"repository": 5}}, "image.repository"),
        ({"tls": {"enabled": True}}, "tls.secretName"),
        # Typos inside config: fail the install, not every pod (the daemon's own schema).
        ({"config": {"sources": {"nvml": {"procesess": True}}}}, "config.sources.nvml"),
        ({"config": {"log": {"level": "DEBUG"}}}, "config.log.level"),
        ({"config": {"sources": {"host": {"interval": 5}}}}, "config.sources.host.interval"),
        ({"config": {"web": {"tls": {"client_auth_type": "Yes"}}}}, "client_auth_type"),
        ({"prometheusRule": {"disabledAlerts": ["GpuHot"]}}, "prometheusRule.disabledAlerts.0"),
        ({"prometheusRule": {"runbookBaseURL": "wiki/accel"}}, "prometheusRule.runbookBaseURL"),
        ({"prometheusRule": {"additionalRuleLabels": {"team-name": "x"}}}, "additionalRuleLabels"),
        ({"config": {"source": {"nvml": {}}}}, "config"),
        ({"extraArgs": ["log.level=debug"]}, "extraArgs.0"),
        ({"securityContext": {"capabilities": {"add": ["sys_ptrace"]}}}, "capabilities.add.0"),
        ({"podResources": {"hostPath": "var/lib/kubelet"}}, "podResources.hostPath"),
        ({"amd": {"rocmPath": "opt/rocm"}}, "amd.rocmPath"),
        ({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "ten"}}}, "maxUnavailable"),
        ({"nodeSelector": {"gpu": True}}, "nodeSelector.gpu"),
        ({"fullnameOverride": "Accel_Exporter"}, "fullnameOverride"),
        ({"nvidia": {"driverCapabilities": "utility compute"}}, "nvidia.driverCapabilities"),
        ({"workloadPodLabels": {"enabled": True}}, "workloadPodLabels.keys"),
        ({"workloadPodLabels": {"enabled": True, "keys": []}}, "workloadPodLabels.keys"),
        ({"workloadPodLabels": {"keys": ["bad key"]}}, "workloadPodLabels.keys.0"),
        ({"workloadPodLabels": {"interval": "60"}}, "workloadPodLabels.interval"),
        ({"workloadPodLabels": {"allowlist": ["team"]}}, "allowlist"),
        ({"rbac": {"create": "yes"}}, "rbac.create"),
        (
            {"serviceMonitor": {"basicAuth": {"username": {"name": "s", "key": "u"}}}},
            "password",
        ),
        (
            {"podMonitor": {"basicAuth": {"username": {"name": "s"}, "password": {"name": "s"}}}},
            "podMonitor.basicAuth.username",
        ),
        ({"serviceMonitor": {"authorization": {"type": "Bearer"}}}, "credentials"),
        (
            {"serviceMonitor": {"authorization": {"type": "Basic", "credentials": CRED}}},
            "serviceMonitor.authorization.type",
        ),
        ({"serviceMonitor": {"authorization": {"token": "abc"}}}, "token"),
        (
            {
                "serviceMonitor": {
                    "basicAuth": {"username": CRED, "password": CRED},
                    "authorization": {"credentials": CRED},
                }
            },
            "should not be valid",
        ),
        ({"podMonitor": {"tlsConfig": {"caFile": "/etc/ca.crt"}}}, "caFile"),
        ({"serviceMonitor": {"tlsConfig": {"minVersion": "1.2"}}}, "tlsConfig.minVersion"),
        ({"serviceMonitor": {"tlsConfig": {"insecure": True}}}, "insecure"),
        (
            {"serviceMonitor": {"tlsConfig": {"ca": {"secret": CRED, "configMap": CRED}}}},
            "tlsConfig.ca",
        ),
        ({"expectedDevices": {"nvidia": -1}}, "expectedDevices.nvidia"),
        ({"expectedDevices": {"amd": "8"}}, "expectedDevices.amd"),
        ({"expectedDevices": {"intel": 8}}, "intel"),
    ],
)
def test_bad_values_are_rejected_naming_the_key(over: dict[str, Any], where: str) -> None:
    found = problems(over)
    assert found, f"{over} was accepted"
    assert any(where in p for p in found), found


def test_good_variants_are_accepted() -> None:
    for over in (
        {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}},
        {"updateStrategy": {"type": "OnDelete"}},
        {"tls": {"enabled": True, "secretName": "certs"}},
        {"podMonitor": {"enabled": True}},
        {"expectedDevices": {"nvidia": 8, "amd": 0}},
        {"nvidia": {"driverCapabilities": "compute,utility"}},
        {
            "serviceMonitor": {
                "basicAuth": {"username": CRED, "password": CRED},
                "tlsConfig": {"ca": {"configMap": CRED}, "caFile": "/etc/ca.crt"},
            }
        },
        {
            "podMonitor": {
                "authorization": {"credentials": CRED},
                "tlsConfig": {"ca": {"secret": CRED}, "insecureSkipVerify": False},
            }
        },
        {"image": {"digest": "sha256:" + "a" * 64}},
        {"workloadPodLabels": {"enabled": True, "keys": ["team", "app.kubernetes.io/name"]}},
        {"workloadPodLabels": {"enabled": False, "keys": [], "interval": "1h30m"}},
        {"rbac": {"create": False}},
        {
            "config": {
                "sources": {"nvml": {"processes": True}},
                "outputs": {"otlp": {"enabled": True}},
            }
        },
        {
            "prometheusRule": {
                "disabledAlerts": ["AccelPowerThrottling"],
                "runbookBaseURL": "https://x",
            }
        },
    ):
        assert problems(over) == [], over


def test_values_a_parent_chart_adds_are_accepted() -> None:
    # As a dependency, the chart's values carry the parent's `global` section and the
    # `enabled` key of the dependency's condition; Helm validates them with the rest.
    assert problems({"global": {"imageRegistry": "registry.example.com"}, "enabled": True}) == []
    assert problems({"global": {}, "enabled": False}) == []
    assert any("enabled" in p for p in problems({"enabled": "yes"}))
    assert any("global" in p for p in problems({"global": "x"}))
