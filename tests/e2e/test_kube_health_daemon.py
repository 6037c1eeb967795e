"""outputs.kubernetes in the real daemon: the verdict reaches the fake API server, and a
refusing or hung API server costs the daemon nothing (metrics, /v1/devices, /status)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_nvml_daemon import OTHERS_OFF
from tests.fakes.kube_api import FakeApiServer, node
from tests.fakes.kubelet import FakeKubelet
from tests.fakes.resource_slices import nvidia_gpu, resource_slice
from tests.helpers.daemon import Daemon, value
from tests.helpers.pki import make_pki
from tests.helpers.workload import enrich

NODE = "gpu-node-a"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


def condition(api: FakeApiServer) -> dict[str, Any] | None:
    found = [
        c for c in api.nodes[NODE]["status"]["conditions"] if c["type"] == "AcceleratorHealthy"
    ]
    return found[0] if found else None


def test_writer_reports_and_survives_a_hung_api_server(daemon_factory, fake_nvml, pki, tmp_path):
    fake = fake_nvml(2)
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    with FakeApiServer(pki, token="t0ken") as api:
        api.nodes = {NODE: node(NODE)}
        api.delay = 3.0  # hung: every request outlives the writer's timeout
        config = {
            "sources": {**OTHERS_OFF, "nvml": {"interval": "1s", "slow_interval": "1s"}},
            "kubernetes": {
                "api_server": api.url,
                "node_name": NODE,
                "token_file": str(token),
                "ca_file": str(pki / "ca.pem"),
            },
            "outputs": {"kubernetes": {"enabled": True, "timeout": "500ms", "interval": "1s"}},
        }
        d: Daemon = daemon_factory(config, env=fake.env())
        u1 = fake.uuid(1)
        d.wait_for(
            lambda: d.status()["outputs"]["kubernetes"]["failures"].get("timeout", 0) >= 2,
            timeout=30,
            what="timeouts counted",
        )
        # Meanwhile everything else answers.
        d.wait_metric("accel_device_up", 1, timeout=60, device="1", uuid=u1)
        for _ in range(3):
            assert value(d.metrics(), "accel_device_up", device="1", uuid=u1) == 1
            assert d.get("/v1/devices").status == 200
        api.delay = 0.0
        d.wait_for(lambda: (condition(api) or {}).get("status") == "True", timeout=30, what="True")
        d.wait_for(lambda: fake.state.event_sets >= 1, what="the worker's event set")
        fake.inject_xid(1, 79)
        d.wait_for(lambda: condition(api)["status"] == "False", timeout=30, what="False")
        assert "xid_79 -> reboot_node" in condition(api)["message"]
        status = d.status()["outputs"]["kubernetes"]
        # No ResourceSlice listing (the workload source has no API access): the failed GPU
        # is listed as unresolved, no rule is made.
        # Xid 79's node reboot reaches both GPUs, and neither resolves.
        unresolved = set(status["unresolved_devices"])
        assert unresolved == {fake.uuid(0), u1} and status["rules"] == {}
        assert api.rules == {} and api.invalid == []


def test_a_failed_dra_gpu_gets_a_rule_selecting_its_resource_slice_device(
    daemon_factory, fake_nvml, pki, tmp_path, sock_dir
):
    """The daemon's own wiring: the workload source's ResourceSlice listing resolves the
    failed GPU's uuid to (driver, pool, device) for the writer."""
    fake = fake_nvml(2)
    u0, u1 = fake.uuid(0), fake.uuid(1)
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    with (
        FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet,
        FakeApiServer(pki, token="t0ken") as api,
    ):
        api.nodes = {NODE: node(NODE)}
        api.slices = [
            resource_slice(
                NODE,
                "gpu.nvidia.com",
                [nvidia_gpu(0, u0, "0000:17:00.0"), nvidia_gpu(1, u1, "0000:2a:00.0")],
            )
        ]
        access = {"api_server": api.url, "token_file": str(token), "ca_file": str(pki / "ca.pem")}
        config = {
            "sources": {**OTHERS_OFF, "nvml": {"interval": "1s", "slow_interval": "1s"}},
            "kubernetes": {**access, "node_name": NODE},
            "workload": enrich(
                str(tmp_path),
                kubelet.socket_path,
                dra={"enabled": True, "interval": "60s", "min_interval": "1s"},
            ),
            "outputs": {"kubernetes": {"enabled": True, "interval": "1s"}},
        }
        d: Daemon = daemon_factory(config, env={**fake.env(), "NODE_NAME": NODE})
        d.wait_for(lambda: fake.state.event_sets >= 1, timeout=60, what="the worker's event set")
        d.wait_for(
            lambda: d.status()["sources"]["workload"].get("k8s_dra") == "ok",
            timeout=30,
            what="the ResourceSlices listed",
        )
        fake.inject_xid(1, 79)
        d.wait_for(lambda: len(api.rules) == 1, timeout=30, what="a DeviceTaintRule")
        (rule,) = api.rules.values()
        # Xid 79 asks a node reboot, which reaches every GPU of the node: the pool-wide rule.
        assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": NODE}
        # No effect first: the rule only says what it would do.
        assert rule["spec"]["taint"]["effect"] == "None"
        status = d.status()["outputs"]["kubernetes"]
        assert status["unresolved_devices"] == [] and api.invalid == []
