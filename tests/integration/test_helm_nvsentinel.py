"""The chart's nvsentinel switch: off by default, nothing mounted; on, the socket's host
directory mounted (read-only) on every node kind's pod and outputs.nvsentinel set."""

from __future__ import annotations

from tests.helpers.deploy import by_kind, validate_manifests
from tests.integration.test_helm_chart import (
    daemon_config,
    render,
    renderer,  # noqa: F401 (a fixture)
)


def daemonsets(docs):
    found = by_kind(docs)["DaemonSet"]
    assert len(found) > 1  # one per node kind: each must agree
    return found


def mounts(ds, name):
    spec = ds["spec"]["template"]["spec"]
    volumes = [v for v in spec["volumes"] if v["name"] == name]
    mounted = [
        m for c in spec["containers"] for m in c.get("volumeMounts", []) if m["name"] == name
    ]
    return volumes, mounted


def test_off_by_default_nothing_mounted(renderer, tmp_path):  # noqa: F811
    docs = render(renderer, tmp_path)
    for ds in daemonsets(docs):
        assert mounts(ds, "nvsentinel") == ([], [])
    assert daemon_config(docs, tmp_path).outputs.nvsentinel.enabled is False


def test_on_mounts_the_socket_directory_and_configures_the_output(renderer, tmp_path):  # noqa: F811
    docs = render(renderer, tmp_path, {"nvsentinel": {"enabled": True}})
    assert validate_manifests(docs) == []
    for ds in daemonsets(docs):
        volumes, mounted = mounts(ds, "nvsentinel")
        assert volumes == [
            {
                "name": "nvsentinel",
                "hostPath": {"path": "/var/run/nvsentinel", "type": "DirectoryOrCreate"},
            }
        ]
        assert mounted == [
            {"name": "nvsentinel", "mountPath": "/var/run/nvsentinel", "readOnly": True}
        ]
    out = daemon_config(docs, tmp_path).outputs.nvsentinel
    assert (out.enabled, out.socket, out.shadow, out.agent) == (
        True,
        "/var/run/nvsentinel/nvsentinel.sock",
        True,
        "accel-exporter",
    )
    docs = render(
        renderer,
        tmp_path,
        {"nvsentinel": {"enabled": True, "socketHostPath": "/run/nvs/", "shadow": False}},
    )
    out = daemon_config(docs, tmp_path).outputs.nvsentinel
    assert (out.socket, out.shadow) == ("/run/nvs/nvsentinel.sock", False)
