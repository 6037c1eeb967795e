"""How far an action reaches, end to end: the fake amdsmi's XGMI hives, the daemon's
verdict records, and the DeviceTaintRules the fake Kubernetes API server gets.

An AMD GPU reset reaches its XGMI hive (AMD: a reset inside a hive "can have effects
beyond the selected device"); AFID 18 (XGMI, fatal) asks the GPU tray reseated, which
reaches the baseboard, and escalates to replacing it. Each names every device of its
scope on /metrics and /v1/devices, and the writer covers the scope: one pool-wide rule
when the scope is the node's whole pool, else a rule per device of the scope.

A GPU that is down from the start (amdsmi could not read its identity) is still the
DRA device its PCI address names: the address the library learnt at init (its
socket). So it gets its rule, its hive's pool-wide rule is one rule, and a restart
while it is still down keeps the rules it wrote. A GPU lost while the daemon ran and
still down when it restarts comes back under a placeholder uuid without its hive: its
rules stay held, and its reset now reaches every GPU (known gap: neither its uuid nor
its domains are kept in health.state_dir yet).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
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


Act = Callable[[list[Any]], None]
Check = Callable[[Daemon, FakeApiServer, list[str], dict[str, str]], None]


def judged(d: Daemon, uuids: list[str]) -> bool:
    """Whether every GPU has a verdict on /v1/devices and none asks for an action."""
    devices = {x["uuid"]: x for x in json.loads(d.get("/v1/devices").text)["devices"]}
    return all(devices.get(u, {}).get("recommended_action") == "none" for u in uuids)


def held(api: FakeApiServer) -> dict[str, tuple[str, dict[str, str], str]]:
    """Each rule the fake holds: its uid, selector and taint value (what a restart must keep)."""
    return {
        name: (
            rule["metadata"]["uid"],
            rule["spec"]["deviceSelector"],
            rule["spec"]["taint"]["value"],
        )
        for name, rule in api.rules.items()
    }


@dataclass
class Rig:
    """The fake amdsmi, kubelet and API server around one daemon with the writer on."""

    daemon_factory: Any
    amdsmi_env: dict[str, str]
    amdsmi_fake: FakeAmdSmi
    pki: Path
    tmp_path: Path
    sock_dir: Path

    def run(
        self,
        hive_ids: list[int],
        act: Act,
        check: Check,
        *,
        down_at_start: bool = False,
        after_restart: Check | None = None,
        others: int = 0,
    ) -> None:
        """Eight GPUs in ``hive_ids``' hives; ``act`` on them, then ``check`` what followed.

        ``down_at_start``: ``act`` runs before the daemon starts (amdsmi enumerates
        the GPUs with it done), else once every GPU is judged healthy.
        ``after_restart``: then the daemon is stopped and started again with the same
        state directory and API server, and that is checked too.
        ``others``: the pool publishes that many more devices, none of them a GPU
        amdsmi lists (so no scope of the GPUs is the whole pool).
        """
        devs = [self.amdsmi_fake.device(i) for i in range(8)]
        state.hives(self.amdsmi_fake, hive_ids)
        uuids = [expected.uuid(dev) for dev in devs]
        pci = {expected.pci_bus_id(dev).lower(): u for dev, u in zip(devs, uuids, strict=True)}
        token = self.tmp_path / "token"
        token.write_text("t0ken\n")
        if down_at_start:
            act(devs)
        with (
            FakeKubelet(str(self.sock_dir / "kubelet.sock")) as kubelet,
            FakeApiServer(self.pki, token="t0ken") as api,
        ):
            api.nodes = {NODE: node(NODE)}
            slices = [amd_gpu(i, bus) for i, bus in enumerate(pci)]
            slices += [amd_gpu(8 + i, f"0000:f{i}:00.0") for i in range(others)]
            api.slices = [resource_slice(NODE, DRIVER, slices)]
            access = {
                "api_server": api.url,
                "token_file": str(token),
                "ca_file": str(self.pki / "ca.pem"),
            }
            config = {
                "sources": {
                    "host": {"enabled": False},
                    "nvml": {"enabled": False},
                    "amdsmi": {"interval": "1s", "slow_interval": "1s", "timeout": "5s"},
                },
                "health": {"state_dir": str(self.tmp_path / "state")},
                "kubernetes": {**access, "node_name": NODE},
                "workload": enrich(
                    str(self.tmp_path),
                    kubelet.socket_path,
                    dra={"enabled": True, "interval": "60s", "min_interval": "1s"},
                ),
                "outputs": {"kubernetes": {"enabled": True, "interval": "1s"}},
            }
            env = {**self.amdsmi_env, "NODE_NAME": NODE}
            d: Daemon = self.daemon_factory(config=config, env=env)
            d.wait_for(
                lambda: d.status()["sources"]["workload"].get("k8s_dra") == "ok",
                timeout=30,
                what="the ResourceSlices listed",
            )
            if not down_at_start:
                d.wait_for(lambda: judged(d, uuids), 30, what="every GPU judged, no action")
                act(devs)
            check(d, api, uuids, pci)
            if after_restart is not None:
                d.stop()
                d = self.daemon_factory(config=config, env=env)
                after_restart(d, api, uuids, pci)
            assert api.invalid == []


@pytest.fixture
def rig(daemon_factory, amdsmi_env, amdsmi_fake, pki, tmp_path, sock_dir) -> Rig:
    return Rig(daemon_factory, amdsmi_env, amdsmi_fake, pki, tmp_path, sock_dir)


def test_a_reset_reaches_the_xgmi_hive_and_a_rule_per_device_of_it(rig: Rig) -> None:
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

    rig.run([1] * 4 + [2] * 4, act, check)


def lose_gpu_5(devs: list[Any]) -> None:
    devs[5].lost_status = state.DRIVER_NOT_LOADED  # down before amdsmi could read its uuid


def lost(d: Daemon) -> dict[str, Any]:
    """GPU 5 on /v1/devices ({} before it is listed): down since the start, known by index."""
    devices = json.loads(d.get("/v1/devices").text)["devices"]
    return next((x for x in devices if x["device"] == "5"), {})


def three_passes_with_gpu5_down(d: Daemon) -> None:
    """Wait until the restarted daemon judged GPU 5 down again and wrote three passes since."""
    d.wait_for(lambda: lost(d)["recommended_action"] == "reset_device", 30, what="GPU 5")
    passes = d.status()["outputs"]["kubernetes"]["reconciles"]
    d.wait_for(
        lambda: d.status()["outputs"]["kubernetes"]["reconciles"] >= passes + 3,
        30,
        what="three passes with GPU 5 still down",
    )


def test_a_reset_in_a_hive_that_is_the_whole_pool_gets_one_rule(rig: Rig) -> None:
    """GPU 5 down from the start, its hive all eight: one pool-wide rule, kept over a restart."""

    def check(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        d.wait_for(lambda: lost(d)["recommended_action"] == "reset_device", 30, what="GPU 5")
        culprit = lost(d)["uuid"]
        # Its address from the socket layout, though its own identity could not be read.
        assert (
            lost(d)["pci_address"].lower() == expected.pci_bus_id(rig.amdsmi_fake.device(5)).lower()
        )
        others = set(uuids) - {uuids[5]}
        d.wait_for(
            lambda: reach(d, culprit) == ("peer_domain", others | {culprit}), 30, what="hive"
        )
        d.wait_for(lambda: set(tainted(api, pci)) == set(uuids), 30, what="one rule, all 8")
        (rule,) = api.rules.values()
        assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": NODE}
        assert rule["spec"]["taint"]["value"] == "reset_device"
        rules = d.status()["outputs"]["kubernetes"]
        assert rules["unresolved_devices"] == []

    def after_restart(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        before = held(api)
        three_passes_with_gpu5_down(d)
        assert held(api) == before  # the same rule: not lifted, not made again
        assert set(tainted(api, pci)) == set(uuids)

    rig.run([7] * 8, lose_gpu_5, check, down_at_start=True, after_restart=after_restart)


def test_a_gpu_down_from_the_start_gets_its_own_device_rule(rig: Rig) -> None:
    """GPU 5 down from the start (its hive unknown: the reset widens to the node's GPUs)
    in a pool with a ninth device amdsmi does not list: a rule per GPU, GPU 5's own
    among them (the device most needing a taint), found by its PCI address."""

    def check(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        d.wait_for(lambda: lost(d)["recommended_action"] == "reset_device", 30, what="GPU 5")
        culprit = lost(d)["uuid"]
        want = ("peer_domain", (set(uuids) - {uuids[5]}) | {culprit})
        d.wait_for(lambda: reach(d, culprit) == want, 30, what="the node's GPUs")
        d.wait_for(lambda: set(tainted(api, pci)) == set(uuids), 30, what="a rule per GPU")
        assert len(api.rules) == 8
        selected = {r["spec"]["deviceSelector"].get("device") for r in api.rules.values()}
        assert selected == {f"gpu-{i}-{128 + i}" for i in range(8)}  # gpu-5-133 included
        assert d.status()["outputs"]["kubernetes"]["unresolved_devices"] == []

    rig.run([7] * 8, lose_gpu_5, check, down_at_start=True, others=1)


def test_an_xgmi_fatal_afid_reaches_the_baseboard_in_one_rule(rig: Rig) -> None:
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

    rig.run([1] * 4 + [2] * 4, act, check)


def test_a_gpu_lost_while_running_keeps_its_rule_over_a_restart(rig: Rig) -> None:
    """GPU 5 lost while the daemon runs (its uuid known), in a hive of four; the daemon
    restarts with it still down (amdsmi no longer reads its uuid nor its hive): the four
    rules it wrote stay as they were (held: their culprit has no verdict now), GPU 5's
    own among them. The restarted daemon knows GPU 5 only by index, address and a
    placeholder uuid, so its reset widens to the node's GPUs; what it adds for that is
    not asserted here (see the module docstring)."""

    def check(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        hive = set(uuids[4:])
        d.wait_for(lambda: reach(d, uuids[5]) == ("peer_domain", hive), 30, what="the hive")
        d.wait_for(lambda: set(tainted(api, pci)) == hive, 30, what="rules for the hive")
        assert len(api.rules) == 4

    def after_restart(d: Daemon, api: FakeApiServer, uuids: list[str], pci: dict[str, str]) -> None:
        before = held(api)
        three_passes_with_gpu5_down(d)
        now = held(api)
        assert {name: now.get(name) for name in before} == before  # none lifted nor remade
        assert set(uuids[4:]) <= set(tainted(api, pci))
        assert d.status()["outputs"]["kubernetes"]["held"] == {uuids[5]: "unknown"}

    rig.run([1] * 4 + [2] * 4, lose_gpu_5, check, after_restart=after_restart)
