"""How far an action reaches, end to end: the fake amdsmi's XGMI hives, the daemon's
verdict records, and the DeviceTaintRules the fake Kubernetes API server gets.

An AMD GPU reset reaches its XGMI hive (AMD: a reset inside a hive "can have effects
beyond the selected device"); AFID 18 (XGMI, fatal) asks the GPU tray reseated, which
reaches the baseboard, and escalates to replacing it. Each names every device of its
scope on /metrics and /v1/devices, and the writer covers the scope: one pool-wide rule
when the scope is the node's whole pool, else a rule per device of the scope.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.fakes.kube_api import FakeApiServer, node
from tests.fakes.kubelet import FakeKubelet
from tests.fakes.resource_slices import amd_gpu, resource_slice
from tests.helpers.daemon import Daemon, samples
from tests.helpers.kube_writer import tainted
from tests.helpers.pki import make_pki
from tests.helpers.workload import enrich

NODE = "mi300x-node-a"
DRIVER = "gpu.amd.com"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


def reach(d: Daemon, uuid: str) -> tuple[str, set[str]]:
    """(scope, affected uuids) of one device's action, from accel_device_action_scope_info."""
    found = [
        dict(labels)
        for (name, labels), v in samples(d.metrics()).items()
        if name == "accel_device_action_scope_info" and ("uuid", uuid) in labels and v == 1
    ]
    scopes = {f["scope"] for f in found}
    assert len(scopes) <= 1, scopes
    return (scopes.pop() if scopes else "", {f["affected_uuid"] for f in found})


def v1_device(d: Daemon, uuid: str) -> dict[str, Any]:
    (dev,) = [x for x in json.loads(d.get("/v1/devices").text)["devices"] if x["uuid"] == uuid]
    return dev


def run(
    daemon_factory: Any,
    amdsmi_env: dict[str, str],
    amdsmi_fake: FakeAmdSmi,
    pki: Path,
    tmp_path: Path,
    sock_dir: Path,
    hive_ids: list[int],
    act: Any,
    check: Any,
) -> None:
    devs = [amdsmi_fake.device(i) for i in range(8)]
    state.hives(amdsmi_fake, hive_ids)
    uuids = [expected.uuid(dev) for dev in devs]
    pci = {expected.pci_bus_id(dev).lower(): u for dev, u in zip(devs, uuids, strict=True)}
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    with (
        FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet,
        FakeApiServer(pki, token="t0ken") as api,
    ):
        api.nodes = {NODE: node(NODE)}
        api.slices = [resource_slice(NODE, DRIVER, [amd_gpu(i, bus) for i, bus in enumerate(pci)])]
        access = {"api_server": api.url, "token_file": str(token), "ca_file": str(pki / "ca.pem")}
        config = {
            "sources": {
                "host": {"enabled": False},
                "nvml": {"enabled": False},
                "amdsmi": {"interval": "1s", "slow_interval": "1s", "timeout": "5s"},
            },
            "kubernetes": {**access, "node_name": NODE},
            "workload": enrich(
                str(tmp_path),
                kubelet.socket_path,
                dra={"enabled": True, "interval": "60s", "min_interval": "1s"},
            ),
            "outputs": {"kubernetes": {"enabled": True, "interval": "1s"}},
        }
        d: Daemon = daemon_factory(config=config, env={**amdsmi_env, "NODE_NAME": NODE})
        d.wait_for(
            lambda: d.status()["sources"]["workload"].get("k8s_dra") == "ok",
            timeout=30,
            what="the ResourceSlices listed",
        )
        d.wait_for(lambda: reach(d, uuids[0]) == ("", set()), 30, what="GPU 0 judged, no action")
        act(devs)
        check(d, api, uuids, pci)
        assert api.invalid == []


def test_a_reset_reaches_the_xgmi_hive_and_a_rule_per_device_of_it(
    daemon_factory, amdsmi_env, amdsmi_fake, pki, tmp_path, sock_dir
):
    """Two hives of four in one pool of eight: a rule per device of GPU 2's hive."""

    def act(devs: list[Any]) -> None:
        devs[2].lost_status = state.DRIVER_NOT_LOADED  # down: a reset asked

    def check(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        hive = set(uuids[:4])
        d.wait_for(lambda: reach(d, uuids[2]) == ("peer_domain", hive), 30, what="the hive")
        dev = v1_device(d, uuids[2])
        assert dev["recommended_action"] == "reset_device"
        assert dev["action_scope"] == "peer_domain"
        assert {m["uuid"] for m in dev["action_scope_devices"]} == hive
        d.wait_for(lambda: set(tainted(api, pci)) == hive, 30, what="rules for the hive")
        assert len(api.rules) == 4
        for rule in api.rules.values():
            assert rule["spec"]["taint"]["value"] == "reset_device"
            assert set(rule["spec"]["deviceSelector"]) == {"driver", "pool", "device"}

    run(
        daemon_factory,
        amdsmi_env,
        amdsmi_fake,
        pki,
        tmp_path,
        sock_dir,
        [1] * 4 + [2] * 4,
        act,
        check,
    )


def test_an_xgmi_fatal_afid_reaches_the_baseboard_in_one_rule(
    daemon_factory, amdsmi_env, amdsmi_fake, pki, tmp_path, sock_dir
):
    """AFID 18: reseat the tray (the baseboard: AMD names no board, so the node's GPUs),
    escalating to a baseboard replacement; one pool-wide rule covers all eight."""

    def act(devs: list[Any]) -> None:
        state.cper(devs[1], [(state.SEV_FATAL, [18])])
        devs[1].cper_time0 = int(time.time()) - 30
        devs[1].cper_count = 1

    def check(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        d.wait_for(lambda: reach(d, uuids[1]) == ("baseboard", set(uuids)), 30, what="board")
        dev = v1_device(d, uuids[1])
        assert dev["recommended_action"] == "inspect_hardware"
        assert dev["escalation"] == "replace_device"
        assert dev["action_scope"] == "baseboard" and len(dev["action_scope_devices"]) == 8
        d.wait_for(lambda: set(tainted(api, pci)) == set(uuids), 30, what="one rule, all 8")
        (rule,) = api.rules.values()
        assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": NODE}
        assert rule["spec"]["taint"]["value"] == "inspect_hardware"

    run(
        daemon_factory,
        amdsmi_env,
        amdsmi_fake,
        pki,
        tmp_path,
        sock_dir,
        [1] * 4 + [2] * 4,
        act,
        check,
    )
