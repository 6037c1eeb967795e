"""DRA attribution through the real daemon: a fake kubelet reporting ``dynamic_resources``
(v1 List), a fake API server serving this node's ``resource.k8s.io/v1`` ResourceSlices
(validated against the official OpenAPI schema), devices in the store.

One node carries a DRA-allocated NVIDIA GPU, a DRA MIG device, an AMD GPU allocated
through AMD's DRA driver (named by PCI address only) and a GPU of the device plugin;
and claims that cannot be followed to a device (a driver with no slice here, a slice
device without an identifying attribute), which are counted and never attributed.
"""

from __future__ import annotations

import json

from tests.fakes.kube_api import FakeApiServer
from tests.fakes.kubelet import FakeClaim, FakeContainer, FakeKubelet, FakePod
from tests.fakes.resource_slices import amd_gpu, attr, nvidia_gpu, nvidia_mig, resource_slice
from tests.helpers.daemon import value
from tests.helpers.pki import make_pki
from tests.helpers.promtool import check_metrics
from tests.helpers.workload import QUIET, enrich, workload_row

NODE = "gpu-7"
G0 = "GPU-00000000-1111-2222-3333-444444444444"
G1 = "GPU-55555555-6666-7777-8888-999999999999"
G2 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
G3 = "GPU-ffffffff-0000-1111-2222-333333333333"
MIG = "MIG-12345678-1234-1234-1234-123456789abc"
AMD = "amd-uuid-0"
NV, AMD_DRIVER = "gpu.nvidia.com", "gpu.amd.com"


def slices() -> list[dict]:
    no_identity = {"name": "gpu-5", "attributes": {"type": attr("gpu")}}
    return [
        resource_slice(
            NODE,
            NV,
            [
                nvidia_gpu(0, G0, "0000:17:00.0"),
                nvidia_gpu(1, G1, "0000:2a:00.0"),
                nvidia_mig(1, MIG, G1, "0000:2a:00.0"),
                no_identity,
            ],
        ),
        resource_slice(NODE, AMD_DRIVER, [amd_gpu(0, "0000:c1:00.0")]),
        # Another node's slice: the field selector keeps it out.
        resource_slice("gpu-8", NV, [nvidia_gpu(0, G2, "0000:17:00.0")]),
    ]


def _claimed(name: str, claim: str, device: tuple[str, str, str]) -> FakePod:
    return FakePod("ml", name, [FakeContainer("main", claims=[FakeClaim("ml", claim, [device])])])


def pods() -> list[FakePod]:
    claimed = _claimed

    return [
        claimed("dra-full", "gpu-claim", (NV, NODE, "gpu-0")),
        claimed("dra-mig", "mig-claim", (NV, NODE, "gpu-1-mig-19-0-1")),
        claimed("dra-amd", "amd-claim", (AMD_DRIVER, NODE, "gpu-0-128")),
        FakePod("ml", "plugin", [FakeContainer("main", {"nvidia.com/gpu": [G2]})]),
        claimed("elsewhere", "x", ("gpu.example.com", "pool-a", "dev-0")),
        claimed("anonymous", "y", (NV, NODE, "gpu-5")),
    ]


def test_dra_and_device_plugin_pods_on_one_node(
    daemon_factory, tmp_path, sock_dir, tmp_path_factory
):
    pki = make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    devices = tmp_path / "devices.json"
    devices.write_text(
        json.dumps(
            {
                "devices": [
                    ["0", G0, "00000000:17:00.0"],
                    ["1", G1, "00000000:2A:00.0"],
                    ["2", G2, "00000000:3B:00.0"],
                    ["3", G3, "00000000:4C:00.0"],
                    ["0", AMD, "0000:c1:00.0", "amd"],
                ],
                "migs": [["1", G1, "1", "0", MIG]],
            }
        )
    )
    with (
        FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet,
        FakeApiServer(pki, token="t0ken") as api,
    ):
        kubelet.pods = pods()
        # A newer kubelet's fields this client does not know: the known ones still count.
        kubelet.unknown_fields = {42: b"\x0a\x03new"}
        api.slices = slices()
        api_access = {
            "api_server": api.url,
            "token_file": str(token),
            "ca_file": str(pki / "ca.pem"),
        }
        config = {
            "sources": QUIET,
            "kubernetes": api_access,
            "workload": enrich(
                str(tmp_path),
                kubelet.socket_path,
                dra={"enabled": True, "interval": "60s", "min_interval": "1s"},
            ),
        }
        d = daemon_factory(
            config,
            extra_sources="tests.helpers.devices:build",
            env={"ACCEL_TEST_DEVICES": str(devices), "NODE_NAME": NODE},
        )
        full = workload_row("0", G0, "ml", "dra-full", "main")
        d.wait_metric("accel_device_workload_info", 1, **full, timeout=30)
        text = d.metrics()
        # The DRA GPU, with its claim beside pod/namespace/container.
        claim = {
            **full,
            "claim_namespace": "ml",
            "claim": "gpu-claim",
            "driver": NV,
            "pool": NODE,
            "dra_device": "gpu-0",
        }
        assert value(text, "accel_device_claim_info", **claim) == 1
        # The DRA MIG device: its GPU and its MIG instance.
        mig_pod = workload_row("1", G1, "ml", "dra-mig", "main")
        assert value(text, "accel_device_workload_info", **mig_pod) == 1
        mig_row = {**mig_pod, "gpu_instance": "1", "compute_instance": "0"}
        assert value(text, "accel_mig_workload_info", **mig_row) == 1
        # AMD's DRA driver names the GPU by PCI address only.
        amd = workload_row("0", AMD, "ml", "dra-amd", "main")
        assert value(text, "accel_device_workload_info", **amd) == 1
        # The device plugin's pod on the same node.
        plugin = workload_row("2", G2, "ml", "plugin", "main")
        assert value(text, "accel_device_workload_info", **plugin) == 1
        # What cannot be followed to a device is counted, and no pod gets a GPU for it.
        errors = "accel_workload_attribution_errors_total"
        assert value(text, errors, reason="dra_unknown_driver") >= 1
        assert value(text, errors, reason="dra_no_identity") >= 1
        for pod in ("elsewhere", "anonymous"):
            assert f'pod="{pod}"' not in text
        # Exactly one pod per GPU: nothing was guessed.
        rows = [
            line for line in text.splitlines() if line.startswith("accel_device_workload_info{")
        ]
        assert len(rows) == 4, rows
        check_metrics(text)
        status = d.status()["sources"]["workload"]
        assert status["k8s_dra"] == "ok" and status["k8s_dra_devices"] == 5
        (request,) = [r for r in api.requests if r["path"].endswith("/resourceslices")][:1]
        assert request["query"]["fieldSelector"] == [f"spec.nodeName={NODE}"]
        assert request["Authorization"] == "Bearer t0ken"

        # The driver publishes a new device and a pod claims it: the claim names a device
        # the cached slices lack, which lists them again at once (not after 60 s).
        (nvidia_slice,) = [s for s in api.slices if s["spec"]["driver"] == NV][:1]
        nvidia_slice["spec"]["devices"].append(nvidia_gpu(3, G3, "0000:4c:00.0"))
        nvidia_slice["spec"]["pool"]["generation"] = 2
        kubelet.pods = [*pods(), _claimed("late", "z", (NV, NODE, "gpu-3"))]
        late = workload_row("3", G3, "ml", "late", "main")
        d.wait_metric("accel_device_workload_info", 1, **late, timeout=30)
        # Listed again, and a listing served the new device (gpu-3 exists only since the
        # change; a listing already in flight then may be the one: what counts is what was
        # served, not when the request arrived).
        assert any("gpu-3" in served for served in api.slice_listings)
