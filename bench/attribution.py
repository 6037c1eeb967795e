"""Cost of workload attribution, off the scrape path: prints one JSON object.

* ``kubelet_list``: one pod-resources List against a fake kubelet on a unix socket
  (real gRPC and proto), for a busy node's reply (pods with GPUs plus CPU-only pods);
  the fake kubelet runs in this process, so its CPU includes the server's encoding;
* ``attribution_pass``: one poll of the workload source (kubelet answer cached) for
  16 GPUs x 16 processes in a fake /proc: cgroup + environ reads and the join;
* ``libcuda_maps_scan``: the checkpoint worker's scan of this machine's real /proc for
  processes mapping libcuda (the cost grows with the number of processes), cold (every
  maps file read) and warm (processes known not to map libcuda are skipped);
* ``pod_labels_list``: one listing of a node's pods (110, the kubelet's default maximum)
  from a fake API server over TLS on loopback, allowlist applied.

Run by hand: ``.venv/bin/python bench/attribution.py``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter.backends.cuda_checkpoint import CudaCheckpointBackend  # noqa: E402
from exporter.config.workload import K8sEnrichConfig, WorkloadConfig  # noqa: E402
from exporter.enrich.pod_labels import parse_pods  # noqa: E402
from exporter.enrich.pod_resources import list_assignments, resource_filter  # noqa: E402
from exporter.enrich.procfs import ProcReader  # noqa: E402
from exporter.kube import KubeAccess, KubeClient, list_pods  # noqa: E402
from exporter.sources.workload import WorkloadSource  # noqa: E402
from exporter.store import Store  # noqa: E402
from tests.fakes.kube_api import FakeApiPod, FakeApiServer  # noqa: E402
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod  # noqa: E402
from tests.helpers.devices import info, process, snapshot  # noqa: E402
from tests.helpers.fakeproc import FakeProc, k8s_v2_systemd  # noqa: E402
from tests.helpers.pki import make_pki  # noqa: E402

GPUS, PER_GPU, CPU_PODS, REPEAT = 16, 16, 20_000, 20


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-0000-0000-0000-000000000000"


def pod_uid(i: int) -> str:
    return f"{i:08x}-aaaa-bbbb-cccc-dddddddddddd"


def timed(fn, repeat: int = REPEAT) -> dict[str, float]:
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return {
        "wall_p50_ms": round(statistics.median(wall) * 1000, 3),
        "cpu_p50_ms": round(statistics.median(cpu) * 1000, 3),
    }


def main() -> None:
    out: dict[str, object] = {"gpus": GPUS, "processes": GPUS * PER_GPU}
    with tempfile.TemporaryDirectory(prefix="bench-") as name:
        tmp = Path(name)
        proc = FakeProc(tmp / "proc")
        readings = [info(str(i), uuid(i)) for i in range(GPUS)]
        pods = []
        for g in range(GPUS):
            pods.append(
                FakePod("ml", f"pod-{g}", [FakeContainer("main", {"nvidia.com/gpu": [uuid(g)]})])
            )
            for k in range(PER_GPU):
                pid = 10_000 + g * PER_GPU + k
                proc.add(pid, cgroup=k8s_v2_systemd(pod_uid(g), f"{g:02x}" * 32))
                readings.append(process(str(g), uuid(g), pid))
        store = Store()
        store.put(snapshot("nvml", readings))
        with FakeKubelet(str(tmp / "kubelet.sock")) as kubelet:
            kubelet.pods = pods
            kubelet.padding_pods = CPU_PODS
            out["kubelet_reply_bytes"] = kubelet.reply().ByteSize()
            wanted = resource_filter(["nvidia.com/gpu"], [])
            out["kubelet_list"] = timed(
                lambda: list_assignments(kubelet.socket_path, 10.0, 64 << 20, wanted), 10
            )
            source = WorkloadSource(
                "workload",
                WorkloadConfig(
                    proc_path=str(tmp / "proc"),
                    k8s=K8sEnrichConfig(socket=kubelet.socket_path, interval=3600.0),
                ),
            )
            source.attach(store)
            loop = asyncio.new_event_loop()
            loop.run_until_complete(source.poll())  # fills the kubelet cache
            out["attribution_pass"] = timed(lambda: loop.run_until_complete(source.poll()))
            out["attribution_rows"] = source.status()["processes_seen"]
            loop.close()
        out["pod_labels_list"] = pod_labels_list(tmp)
    out["proc_entries"] = len(list(ProcReader("/proc").pids()))
    out["libcuda_maps_scan_cold"] = timed(
        lambda: CudaCheckpointBackend({"proc_path": "/proc"})._candidates([], True), 5
    )
    warm = CudaCheckpointBackend({"proc_path": "/proc"})
    warm._candidates([], True)
    out["libcuda_maps_scan_warm"] = timed(lambda: warm._candidates([], True), 5)
    print(json.dumps(out, indent=2))


def pod_labels_list(tmp: Path) -> dict[str, float]:
    """One API listing of 110 pods with ten labels each, through TLS on loopback."""
    pki = make_pki(tmp, ("server", "127.0.0.1"))
    (tmp / "token").write_text("bench")
    labels = {f"example.com/key-{k}": f"value-{k}" for k in range(10)}
    with FakeApiServer(pki, token="bench") as api:
        api.pods = [FakeApiPod("ml", f"pod-{i}", "node-a", labels) for i in range(110)]
        access = KubeAccess(api.url, "node-a", str(tmp / "token"), str(pki / "ca.pem"))
        client = KubeClient(access, 10.0, 16 << 20)
        keys = ["example.com/key-1", "team"]
        return timed(lambda: parse_pods(list_pods(client, "node-a"), keys), 10)


if __name__ == "__main__":
    main()
