"""Driving the Kubernetes health writer in-process: verdicts in a store, a virtual clock,
the fake API server (tests/fakes/kube_api.py) on the other side."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from exporter.config.kubernetes import KubernetesConfig
from exporter.config.outputs import KubernetesOutputConfig
from exporter.model import OK, Reading, Snapshot
from exporter.outputs.kube_health import KubeHealthWriter
from exporter.outputs.kube_rules import RULES_PATH
from exporter.store import Store
from exporter.verdict import DeviceHealth, Reason
from tests.fakes.kube_api import FakeApiServer
from tests.fakes.resource_slices import nvidia_gpu, resource_slice

NODE = "gpu-node-a"
TOKEN = "t0ken"


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def verdict(
    device: str,
    uuid: str,
    state: str,
    *reasons: str,
    action: str = "none",
    why: str = "",
    scope: str = "device",
    scope_uuids: tuple[str, ...] = (),
) -> DeviceHealth:
    """One device's verdict as the health judge publishes it.

    ``scope`` and ``scope_uuids`` are how far its action reaches (the judge lists the
    device itself among them while the action is not ``none``).
    """
    reach = tuple(sorted(set(scope_uuids) | {uuid})) if action != "none" else ()
    return DeviceHealth(
        device=device,
        uuid=uuid,
        state=state,
        reasons=tuple(Reason(r, state) for r in sorted(reasons)),
        findings=(),
        action=action,
        since=0.0,
        updated=0.0,
        unknown_why=why,
        scope=scope if action != "none" else "device",
        scope_uuids=reach,
    )


def publish(
    store: Store, *verdicts: DeviceHealth, readings: tuple[Reading, ...] = (), source: str = "nvml"
) -> None:
    """A fresh poll of ``source`` that judged ``verdicts`` (fresh for as long as the test runs)."""
    now = time.time()
    store.put(Snapshot(source, readings, OK, now, now, time.monotonic(), 0.0, 1e9, health=verdicts))


def device_info(device: str, uuid: str, pci_bus_id: str, vendor: str = "amd") -> Reading:
    """An ``accel_device_info`` reading naming a device's PCI function."""
    from exporter.catalog.device import INFO_LABELS

    labels = {"vendor": vendor, "device": device, "uuid": uuid, "pci_bus_id": pci_bus_id}
    return Reading("accel_device_info", tuple(labels.get(n, "") for n in INFO_LABELS), 1.0)


def nvidia_slices(uuids: list[str], node: str = NODE) -> list[dict[str, Any]]:
    """One ResourceSlice of NVIDIA's DRA driver publishing ``uuids`` as gpu-0, gpu-1, ..."""
    devices = [nvidia_gpu(i, u, f"0000:{0x17 + i:02x}:00.0") for i, u in enumerate(uuids)]
    return [resource_slice(node, "gpu.nvidia.com", devices)]


def run_passes(
    w: KubeHealthWriter,
    store: Store,
    clock: Clock,
    *records: DeviceHealth,
    passes: int = 1,
    every: float = 30.0,
    readings: tuple[Reading, ...] = (),
) -> None:
    """``records`` published as one fresh poll, then ``passes`` writer passes ``every`` apart.

    The clock moves ``every`` before each pass. For any writer: a test builds the
    records itself (``verdict(..., scope=, scope_uuids=)``), or takes them from a
    health judge that raised them.
    """
    publish(store, *records, readings=readings)
    for _ in range(passes):
        clock.now += every
        w.reconcile()


def selects(rule: dict[str, Any], item: dict[str, Any], device: dict[str, Any]) -> bool:
    """Whether a DeviceTaintRule selects one device of a ResourceSlice, as DRA matches them.

    Each selector field that is set must equal the device's: ``driver`` the slice's,
    ``pool`` the slice's pool, ``device`` the device's name. A rule without ``device``
    selects every device of the pool.
    """
    sel = rule["spec"].get("deviceSelector") or {}
    spec = item["spec"]
    have = {"driver": spec["driver"], "pool": spec["pool"]["name"], "device": device["name"]}
    return bool(sel) and all(have[k] == v for k, v in sel.items() if v is not None)


def tainted(api: FakeApiServer, pci_uuids: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Each device the fake's rules select, by uuid, with the names of the rules selecting it.

    A device is named by its slice's ``uuid`` attribute, else by the uuid ``pci_uuids``
    gives its PCI address (AMD's driver publishes none), else by its DRA name.
    """
    out: dict[str, list[str]] = {}
    for item in api.slices:
        for device in item["spec"].get("devices", []):
            attrs = device.get("attributes", {})
            ident = (attrs.get("uuid") or {}).get("string", "")
            for key in ("resource.kubernetes.io/pciBusID", "pcieBusID", "pciAddress"):
                bus = (attrs.get(key) or {}).get("string", "")
                ident = ident or (pci_uuids or {}).get(bus, "")
            ident = ident or device["name"]
            names = sorted(n for n, r in api.rules.items() if selects(r, item, device))
            if names:
                out[ident] = names
    return out


def config(api: FakeApiServer, pki: Path, token_file: Path, **kw: Any) -> KubernetesOutputConfig:
    """``outputs.kubernetes`` (the writer's own keys)."""
    return KubernetesOutputConfig(enabled=True, **{"timeout": 5.0, **kw})


def access(api: FakeApiServer, pki: Path, token_file: Path) -> KubernetesConfig:
    """The ``kubernetes`` section pointed at the fake API server (the token written)."""
    token_file.write_text(TOKEN + "\n")
    return KubernetesConfig(
        api_server=api.url, node_name=NODE, token_file=str(token_file), ca_file=str(pki / "ca.pem")
    )


def writer(
    api: FakeApiServer, pki: Path, tmp_path: Path, store: Store, clock: Clock, **kw: Any
) -> KubeHealthWriter:
    """A writer on ``store`` and ``clock`` (not started: the test calls reconcile())."""
    token = tmp_path / "token"
    return KubeHealthWriter(
        config(api, pki, token, **kw), store, kube=access(api, pki, token), wall=clock
    )


def rule_requests(api: FakeApiServer, *methods: str) -> list[dict[str, Any]]:
    """The DeviceTaintRule requests the fake answered (of ``methods``, when given)."""
    return [
        r
        for r in api.requests
        if r["path"].startswith(RULES_PATH) and (not methods or r["method"] in methods)
    ]


def node_patches(api: FakeApiServer, node: str = NODE) -> list[dict[str, Any]]:
    """The Node status patches the fake answered."""
    path = f"/api/v1/nodes/{node}/status"
    return [r for r in api.requests if r["path"] == path and r["method"] == "PATCH"]


def condition(api: FakeApiServer, node: str = NODE) -> dict[str, Any] | None:
    """The ``AcceleratorHealthy`` condition the fake's Node carries, or None."""
    found = [
        c for c in api.nodes[node]["status"]["conditions"] if c["type"] == "AcceleratorHealthy"
    ]
    return found[0] if found else None
