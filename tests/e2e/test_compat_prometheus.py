"""dcgm-exporter's and AMD device-metrics-exporter's dashboards against the daemon with compat on.

A mixed node (fake libnvidia-ml: a GPU held by a pod, a MIG GPU, a GPU running
a Slurm job; fake libamd_smi: eight MI300X, one held by a pod, one by a Slurm
job) runs with ``outputs.prometheus.compat: [dcgm, amd]``; a real Prometheus
scrapes it and runs every query of NVIDIA's dashboard and of AMD's four, with
the template variables substituted. Each returns a series unless the migration
table (scripts/compat_table.py) lists its metric as not served, or its
``card_model`` matcher routes it to another card family, as it would with the
original exporter on this hardware.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from exporter.outputs.compat import dcgm
from scripts import compat_table as table
from tests.e2e.test_prometheus_server import Prometheus, wait_until
from tests.fakes.amdsmi import expected
from tests.fakes.amdsmi.state import FakeAmdSmi, cpx
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.fakes.nvml.control import MigInstance, Process
from tests.helpers.daemon import samples
from tests.helpers.fakeproc import CID, FakeProc, k8s_v2_systemd, slurm_v2
from tests.helpers.promql import dashboard_queries
from tests.helpers.promtool import check_metrics

FIXTURES = Path(__file__).parents[1] / "fixtures" / "compat"
DCGM_DASHBOARD = FIXTURES / "dcgm-exporter" / "dcgm-exporter-dashboard.json"
AMD_DASHBOARDS = [
    FIXTURES / "device-metrics-exporter" / f"dashboard_{name}.json"
    for name in ("gpu", "job", "node", "overview")
]
HOST, CLUSTER = "gpu-node-7", "lab"
MIB = float(1 << 20)
GIB = 1 << 30
# The GPM figures of GPU 0 (percent, or MiB/s for PCIe): graphics, tensor, DRAM, PCIe tx/rx.
GPM = {1: 61.5, 5: 23.25, 10: 47.0, 20: 1500.0, 21: 750.0}
MIG_SMALL = "MIG-66666666-7777-8888-9999-000000000000"
PART = "102-G30211-00"  # the fake's board part number (an MI300X OAM)
# Sensors an MI300X lacks: the original serves nothing for them on this card either.
ABSENT_ON_CARD = {"gpu_edge_temperature"}  # no edge sensor (amdsmi: not supported)


# promtool's lint findings that the originals' own names cause (they serve the same):
# dcgm-exporter's labels UUID, modelName, GPU_I_* and DCGM_FI_DRIVER_VERSION are not
# snake_case and its counters lack _total; both name some families by their type
# (DCGM_FI_DEV_PCIE_REPLAY_COUNTER, gpu_violation_current_accumulated_counter), and AMD's
# gauges end in _total (gpu_ecc_correct_total) or _count (pcie_replay_count). Nothing else,
# and nothing on our own families, may be reported.
_ORIGINAL_LINT = re.compile(
    r"^(?P<name>DCGM_FI_\w+|gpu_\w+|pcie_\w+) ("
    r"label names should be written in 'snake_case' not 'camelCase'"
    r'|counter metrics should have "_total" suffix'
    r"|metric name should not include type 'counter'"
    r'|non-counter metrics should not have "_total" suffix'
    r'|non-histogram and non-summary metrics should not have "_count" suffix'
    r")$"
)


def check_compat_metrics(text: str, dcgm: bool = True) -> None:
    """promtool parses the exposition and lints nothing but the originals' own naming."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is required (apt-get install prometheus)"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    lines = (result.stdout.decode() + result.stderr.decode()).splitlines()
    matches = [_ORIGINAL_LINT.match(line) for line in lines]
    other = [line for line, m in zip(lines, matches, strict=True) if m is None]
    assert not other, "\n".join(other)
    named = {m.group("name") for m in matches if m is not None}
    assert any(n.startswith("DCGM_") for n in named) == dcgm, "dcgm-exporter's naming is linted"
    # Without those families, the rest (ours and AMD's other ones) draws no finding at all.
    check_metrics(_without(text, named))


def _without(text: str, names: set[str]) -> str:
    def name(line: str) -> str:
        if line.startswith("# "):
            return line.split(" ", 3)[2]
        return re.split(r"[{ ]", line, maxsplit=1)[0]

    return "".join(line for line in text.splitlines(keepends=True) if name(line) not in names)


def value(got: dict[Any, float], name: str, **labels: str) -> float | None:
    """The value of the one series of ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in got.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def _complete(d: Any, counts: dict[str, int]) -> str:
    """A body with ``counts`` series of each family (a worker restarting under load on this
    shared machine empties its source's series for a moment, by design)."""

    def check() -> str | None:
        text = d.metrics()
        got = samples(text)
        found = {n: sum(1 for name, _ in got if name == n) for n in counts}
        return text if found == counts else None

    text: str = d.wait_for(check, 60, what=f"series {counts}")
    return text


def wait_series(d: Any, name: str, expected: float | None = None, **labels: str) -> float:
    """Wait until one series of ``name`` with ``labels`` (and ``expected``) is exposed."""

    def check() -> tuple[float] | None:
        v = value(samples(d.metrics()), name, **labels)
        return None if v is None or (expected is not None and v != expected) else (v,)

    found: tuple[float] = d.wait_for(check, 60, what=f"{name}{labels} == {expected}")
    return found[0]


def _routed_away(expr: str, card_model: str) -> bool:
    """Whether a card_model matcher in ``expr`` excludes this card (the panel is for another)."""
    for op, pattern in re.findall(r'card_model\s*(=~|!~)\s*"([^"]*)"', expr):
        hit = re.fullmatch(pattern, card_model) is not None
        if hit != (op == "=~"):
            return True
    return False


def _not_served(expr: str) -> set[str]:
    names = set(re.findall(r"\b(?:DCGM_FI_\w+|gpu_\w+|pcie_\w+)\b", expr))
    return {n for n in names if n in table.NOT_SERVED_METRICS}


def _substitute(expr: str, values: dict[str, str]) -> str:
    text = re.sub(r"\$\{?__(rate_interval|interval|range)\}?", "30s", expr)
    for name, val in sorted(values.items(), key=lambda kv: -len(kv[0])):
        text = text.replace("${" + name + "}", val).replace("$" + name, val)
    assert "$" not in text, text
    # Prometheus 3's quoted metric name in braces ({"name", ...}), which the Debian
    # Prometheus 2 the tests run does not parse, as the __name__ matcher it stands for.
    return re.sub(r'\{\s*"([A-Za-z_:][\w:]*)"\s*,', r'{__name__="\1",', text)


def _label_values(prom: Prometheus, expr: str) -> list[str]:
    """Grafana's label_values(selector, label) / label_values(label), through the label API."""
    body = re.fullmatch(r"\s*label_values\((.*)\)\s*", expr, re.DOTALL)
    assert body is not None, expr
    selector, comma, label = body.group(1).rpartition(",")
    if not comma:
        selector, label = "", body.group(1)
    params = {"match[]": selector.strip()} if selector.strip() else {}
    path = f"label/{urllib.parse.quote(label.strip())}/values"
    return prom.api(path, **params)  # type: ignore[no-any-return]


def _mixed_node(
    daemon_factory: Any, fake_nvml: Any, env: dict[str, str], tmp: Path, kubelet: Any
) -> tuple[Any, Any]:
    nv = fake_nvml(3)
    nv.set_gpm(0, GPM)
    nv.set_mig(
        1,
        [
            MigInstance(1, 0, 20 * GIB, 3 * GIB, util_percent=40, dram_percent=10),
            MigInstance(2, 0, 10 * GIB, 1 * GIB, 25, 5, uuid=MIG_SMALL),
        ],
    )
    nv.set_processes(2, [Process(1201, used_memory=5 << 30)])
    proc = FakeProc(tmp / "proc")
    proc.add(1201, cgroup=slurm_v2("31337"), environ={"SLURM_JOB_USER": "alice"})
    proc.add(4242, cgroup=k8s_v2_systemd(cid=CID))
    proc.add(4343, cgroup=slurm_v2("777"), environ={"SLURM_JOB_USER": "bob"})
    quiet = {name: {"enabled": False} for name in ("host", "ccl_ras", "ccl_inspector")}
    fast = {"interval": "1s", "slow_interval": "1s", "processes": True}
    config = {
        "sources": {**quiet, "nvml": fast, "amdsmi": fast},
        "workload": {
            "interval": "500ms",
            "proc_path": str(tmp / "proc"),
            "k8s": {"socket": kubelet.socket_path, "interval": "1s"},
        },
        "outputs": {
            "prometheus": {
                "compat": ["dcgm", "amd"],
                "workload_labels": True,
                "cluster_name": CLUSTER,
            }
        },
    }
    return nv, daemon_factory(config, env={**nv.env(), **env, "NODE_NAME": HOST})


@pytest.mark.timeout(300)
def test_dashboards_answer_on_a_mixed_node(
    daemon_factory: Any,
    fake_nvml: Any,
    amdsmi_env: dict[str, str],
    amdsmi_fake: FakeAmdSmi,
    tmp_path: Path,
    sock_dir: Path,
) -> None:
    gpu0, gpu1 = amdsmi_fake.device(0), amdsmi_fake.device(1)
    # AMD GPU 0 runs pid 4242 (a pod), GPU 1 pid 4343 (Slurm job 777).
    gpu1.proc_pid[0], gpu1.proc_vram[0], gpu1.proc_count = 4343, 1 << 30, 1
    gpu0.proc_count = 1
    with FakeKubelet(str(sock_dir / "kubelet.sock")) as kubelet:
        nv, d = _mixed_node(daemon_factory, fake_nvml, amdsmi_env, tmp_path, kubelet)
        n0 = nv.uuid(0)
        bus0 = expected.pci_bus_id(gpu0)
        kubelet.pods = [
            FakePod("ml", "trainer", [FakeContainer("main", {"nvidia.com/gpu": [n0]})]),
            FakePod("ml", "small", [FakeContainer("c", {"nvidia.com/mig-1g.10gb": [MIG_SMALL]})]),
            FakePod("rocm", "train", [FakeContainer("main", {"amd.com/gpu": [bus0]})]),
        ]
        pod = {"pod": "trainer", "namespace": "ml", "container": "main"}
        wait_series(d, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPM[5] / 100, gpu="0", **pod)
        wait_series(d, "DCGM_FI_DEV_FB_USED", 1024.0, GPU_I_ID="2", pod="small")
        wait_series(d, "DCGM_FI_DEV_GPU_UTIL", gpu="2", hpc_job="31337")
        wait_series(d, "gpu_gfx_activity", gpu_id="0", pod="train", namespace="rocm")
        wait_series(d, "gpu_gfx_activity", gpu_id="1", job_id="777", job_user="bob")
        text = _complete(d, {"DCGM_FI_DEV_GPU_TEMP": 3, "gpu_used_vram": 8})
        check_compat_metrics(text)
        got = samples(text)
        _dcgm_values(nv, got)
        _amd_values(amdsmi_fake, got)
        _workload_labels(got, n0)

        # XID 13 on GPU 2: DCGM_FI_DEV_XID_ERRORS holds the last XID, as alerts expect.
        nv.inject_xid(2, 13)
        xid = {"err_code": "13", "err_msg": "Graphics Engine Exception"}
        wait_series(d, "DCGM_FI_DEV_XID_ERRORS", 13.0, gpu="2", **xid)
        # The dashboards count unhealthy GPUs per job and pod: an XGMI link of each held
        # GPU goes down (our verdict degraded, gpu_health 0), as AMD's would on a link loss.
        gpu0.xgmi_link_status[0] = gpu1.xgmi_link_status[0] = 0
        wait_series(d, "gpu_health", 0.0, gpu_id="0", pod="train")
        wait_series(d, "gpu_health", 0.0, gpu_id="1", job_id="777")
        host, port = d.address
        prom = Prometheus(tmp_path, f"{host}:{port}").start()
        try:
            instance = f"{host}:{port}"
            wait_until(
                lambda: len(prom.query("count_over_time(DCGM_FI_DEV_GPU_TEMP[30s]) > 3")) == 3,
                "several scrapes of every GPU",
            )
            _run_dcgm_dashboard(prom, instance)
            # What alert rules and HPA/KEDA scalers in the field select (prometheus-adapter
            # maps namespace and pod to the pod resource); a counter typed unknown under
            # OpenMetrics (Prometheus scrapes OpenMetrics) still rates by its name.
            for query in (
                'DCGM_FI_DEV_GPU_UTIL{namespace="ml", pod="trainer"}',
                'avg by (namespace, pod) (DCGM_FI_DEV_FB_USED{pod!=""})',
                "DCGM_FI_DEV_XID_ERRORS > 0",
                "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[30s])",
                'DCGM_FI_DEV_FB_USED{GPU_I_PROFILE="2g.slice", pod="small"}',
            ):
                _answered(prom, query, "field query")
            _run_amd_dashboards(prom, expected.uuid(gpu0))
        finally:
            prom.stop()


def _dcgm_values(nv: Any, got: dict[Any, float]) -> None:
    """Every served dcgm field in dcgm-exporter's unit, from the fake's raw state."""
    dev = nv.device(0)
    ident = {"gpu": "0", "UUID": nv.uuid(0), "device": "nvidia0", "Hostname": HOST}

    def at(name: str, **labels: str) -> float | None:
        # prometheus_client's parser names a counter's samples <name>_total; Prometheus keeps
        # the name as served (the dashboard queries below select it).
        counter = next(f for f in dcgm.ORDER if f.name == name).kind == "counter"
        return value(got, name + "_total" if counter else name, **ident, **labels)

    assert at("DCGM_FI_DEV_SM_CLOCK") == dev.clock_mhz[1]
    assert at("DCGM_FI_DEV_MEM_CLOCK") == dev.clock_mhz[2]
    assert at("DCGM_FI_DEV_GPU_TEMP") == dev.temperature_gpu
    assert at("DCGM_FI_DEV_MEMORY_TEMP") == dev.temperature_memory
    assert at("DCGM_FI_DEV_POWER_USAGE") == dev.power_mw / 1000
    energy = at("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert energy is not None and energy >= dev.energy_mj - 100 * dev.energy_step_mj  # mJ
    assert at("DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == dev.pcie_replays
    assert at("DCGM_FI_DEV_GPU_UTIL") == dev.util_gpu
    assert at("DCGM_FI_DEV_MEM_COPY_UTIL") == dev.util_memory
    assert at("DCGM_FI_DEV_ENC_UTIL") == dev.util_encoder
    assert at("DCGM_FI_DEV_DEC_UTIL") == dev.util_decoder
    assert at("DCGM_FI_DEV_FB_USED") == dev.memory_used / MIB
    assert at("DCGM_FI_DEV_FB_RESERVED") == dev.memory_reserved / MIB
    free = value(got, "accel_memory_free_bytes", device="0", uuid=nv.uuid(0))
    assert free is not None and at("DCGM_FI_DEV_FB_FREE") == free / MIB
    assert at("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS") == dev.remapped_corrected
    assert at("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") == dev.remapped_uncorrected
    assert at("DCGM_FI_DEV_ROW_REMAP_FAILURE") == dev.remapped_failure
    assert at("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == GPM[1] / 100
    assert at("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == GPM[5] / 100
    assert at("DCGM_FI_PROF_DRAM_ACTIVE") == GPM[10] / 100
    assert at("DCGM_FI_PROF_PCIE_TX_BYTES") == GPM[20] * MIB  # bytes per second
    assert at("DCGM_FI_PROF_PCIE_RX_BYTES") == GPM[21] * MIB
    assert at("DCGM_FI_DEV_XID_ERRORS", err_code="0", err_msg="No Error") == 0
    # Labels as dcgm-exporter writes them, pod attribution included.
    temp = [k for k in got if k[0] == "DCGM_FI_DEV_GPU_TEMP" and dict(k[1])["gpu"] == "0"]
    assert dict(temp[0][1]) == {
        **ident,
        "pci_bus_id": dict(temp[0][1])["pci_bus_id"],
        "modelName": dev.name.decode(),
        "DCGM_FI_DRIVER_VERSION": nv.state.driver_version.decode(),
        "pod": "trainer",
        "namespace": "ml",
        "container": "main",
    }
    # The MIG GPU: per GPU instance, with its profile; the attributed one with its pod.
    mig = {"gpu": "1", "UUID": nv.uuid(1)}
    one = {**mig, "GPU_I_ID": "1", "GPU_I_PROFILE": "1g.slice"}
    two = {**mig, "GPU_I_ID": "2", "GPU_I_PROFILE": "2g.slice", "pod": "small"}
    assert value(got, "DCGM_FI_DEV_FB_USED", **one) == 3 * 1024
    assert value(got, "DCGM_FI_DEV_FB_FREE", **one) == 17 * 1024
    assert value(got, "DCGM_FI_DEV_FB_USED", **two) == 1024
    assert value(got, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", **one) == 0.40
    assert value(got, "DCGM_FI_PROF_DRAM_ACTIVE", **two) == 0.05
    assert value(got, "DCGM_FI_DEV_GPU_TEMP", **mig) is not None  # the GPU itself
    assert not [k for k in got if k[0] == "DCGM_FI_DEV_GPU_UTIL" and "GPU_I_ID" in dict(k[1])]


def _amd_values(fake: FakeAmdSmi, got: dict[Any, float]) -> None:
    """Every served AMD field in device-metrics-exporter's unit, from the fake's raw state."""
    for i in range(8):
        dev = fake.device(i)
        ident = {"gpu_id": str(i), "gpu_uuid": expected.uuid(dev), "hostname": HOST}

        def at(name: str, dev_ident: dict[str, str] = ident, **labels: str) -> float | None:
            return value(got, name, **dev_ident, **labels)

        labels = {
            k: v
            for k, v in next(
                k[1] for k in got if k[0] == "gpu_used_vram" and dict(k[1])["gpu_id"] == str(i)
            )
        }
        assert labels["card_model"] == PART
        assert labels["serial_number"] == dev.board_serial.decode()
        assert labels["cluster_name"] == CLUSTER
        assert labels["gpu_partition_id"] == "0"
        assert labels["gpu_compute_partition_type"] == "spx"
        assert labels["driver_version"] == dev.driver_version.decode()
        assert at("gpu_package_power") == dev.socket_power  # W
        assert at("gpu_power_usage") == dev.socket_power
        energy_uj = dev.energy_acc * expected.f32(dev.energy_resolution)
        assert at("gpu_energy_consumed") == pytest.approx(energy_uj, rel=1e-9)  # uJ
        assert at("gpu_total_vram") == dev.mem_total[0] / MIB  # MB
        assert at("gpu_used_vram") == dev.mem_used[0] / MIB
        assert at("gpu_free_vram") == (dev.mem_total[0] - dev.mem_used[0]) / MIB
        assert at("gpu_gfx_activity") == dev.gfx_activity  # percent
        assert at("gpu_umc_activity") == dev.umc_activity
        assert at("gpu_junction_temperature") == dev.temp[1]  # hotspot
        assert at("gpu_memory_temperature") == dev.temp[2]
        assert at("gpu_hbm_temperature", hbm_index="0") == dev.temp[3]
        assert at("pcie_bandwidth") == dev.pcie_bandwidth  # Mb/s
        assert at("pcie_max_speed") == 32.0  # GT/s, gen 5
        assert at("pcie_speed") == 32.0
        assert at("pcie_replay_count") == dev.pcie_replay
        assert at("pcie_recovery_count") == dev.pcie_recovery
        assert at("pcie_nack_sent_count") == dev.pcie_nak_sent
        assert at("gpu_ecc_correct_total") == dev.ecc_total[0]
        assert at("gpu_ecc_correct_umc") == dev.ecc_block[0][0]
        assert at("gpu_clock", clock_type="system") == dev.clk[0]  # MHz
        assert at("gpu_clock", clock_type="memory") == dev.clk[4]
        assert at("gpu_health") == 1
        busy = sum(20 + i + k for k in range(8)) / 8
        assert at("gpu_gfx_busy_instantaneous", xcc_index="0") == pytest.approx(busy)
    assert value(got, "gpu_nodes_total", hostname=HOST, cluster_name=CLUSTER) == 8


def _workload_labels(got: dict[Any, float], nvidia0: str) -> None:
    """workload_labels: our own per-device series carry the pod and the Slurm job."""
    util = {dict(k[1])["uuid"]: dict(k[1]) for k in got if k[0] == "accel_utilization_ratio"}
    assert util[nvidia0]["pod"] == "trainer" and util[nvidia0]["namespace"] == "ml"
    assert util[nvidia0]["container"] == "main"
    jobs = [labels for labels in util.values() if labels.get("job_id")]
    assert sorted(j["job_id"] for j in jobs) == ["31337", "777"]


def _run_dcgm_dashboard(prom: Prometheus, instance: str) -> None:
    dashboard = json.loads(DCGM_DASHBOARD.read_text())
    values = {"instance": instance, "gpu": "0"}
    for variable in ("instance", "gpu"):
        found = prom.api("label/" + variable + "/values", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
        assert values[variable] in found, (variable, found)
    ran = 0
    for where, expr in dashboard_queries(dashboard):
        query = _substitute(expr, values)
        if _not_served(query):
            continue
        _answered(prom, query, where)
        ran += 1
    assert ran == 10  # eight panels, two variables


def _run_amd_dashboards(prom: Prometheus, uuid0: str) -> None:
    values = {
        "g_metrics_prefix": "",
        "g_cluster_name": CLUSTER,
        "g_hostname": HOST,
        "g_gpu_id": "0",
        "g_gpu_partition_id": "0",
        "g_gpu_uuid": uuid0,
        "g_job_id": "777",
        "g_pod": "train",
    }
    answered, skipped = 0, []
    for path in AMD_DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for variable in dashboard["templating"]["list"]:
            query = variable.get("query")
            text = query.get("query", "") if isinstance(query, dict) else ""
            if not text:
                continue
            if text.strip() in table.NOT_SERVED_VARIABLES:
                skipped.append(text)
                continue
            assert _label_values(prom, _substitute(text, values)), (path.name, variable["name"])
            answered += 1
        for where, expr in dashboard_queries(dashboard):
            if where.startswith("variable"):
                continue
            query = _substitute(expr, values)
            lacking = set(re.findall(r"\bgpu_\w+", query)) & ABSENT_ON_CARD
            if _routed_away(query, PART) or _not_served(query) or lacking:
                skipped.append(query)
                continue
            _answered(prom, query, f"{path.name} {where}")
            answered += 1
    assert answered > 100, answered


def _answered(prom: Prometheus, query: str, where: str) -> None:
    """The query returns a series (a source restarting under load may take a few seconds)."""
    try:
        wait_until(lambda: prom.query(query) or None, f"{where}: {query}", timeout=30)
    except AssertionError:
        raise AssertionError((where, query, _around(prom, query))) from None


def _around(prom: Prometheus, query: str) -> list[Any]:
    """What the query's metrics hold, to tell a missing series from a wrong label."""
    names = sorted(set(re.findall(r"\b(?:gpu|pcie)_[a-z_0-9]+", query)))
    targets = [t.get("lastError") for t in prom.api("targets")["activeTargets"]]
    return [
        targets,
        *(prom.query(f'count by (gpu_id, hostname) ({{__name__="{n}"}})') for n in names),
    ]


@pytest.mark.timeout(120)
def test_cpx_mi300x_under_amd_compat(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    cpx(amdsmi_fake, gpus=1)
    config = {
        "sources": {
            **{n: {"enabled": False} for n in ("host", "nvml", "ccl_ras", "ccl_inspector")},
            "amdsmi": {"interval": "1s", "slow_interval": "1s"},
        },
        "outputs": {"prometheus": {"compat": ["amd"]}},
    }
    d = daemon_factory(config, env={**amdsmi_env, "NODE_NAME": HOST})
    wait_series(d, "gpu_gfx_busy_instantaneous", 7.0, gpu_id="7")
    text = _complete(d, {"gpu_used_vram": 8, "gpu_package_power": 8})
    check_compat_metrics(text, dcgm=False)
    got = samples(text)
    for p in range(8):
        dev = amdsmi_fake.device(p)
        ident = {"gpu_id": str(p), "gpu_uuid": expected.uuid(dev)}
        labels = dict(
            next(k[1] for k in got if k[0] == "gpu_used_vram" and dict(k[1])["gpu_id"] == str(p))
        )
        assert labels["gpu_partition_id"] == str(p)
        assert labels["gpu_compute_partition_type"] == "cpx"
        assert labels["card_model"] == PART
        # Each partition's own XCP, in percent.
        assert value(got, "gpu_gfx_busy_instantaneous", **ident, xcc_index=str(p)) == p
        assert value(got, "gpu_used_vram", **ident) == dev.mem_used[0] / MIB
        # Physical quantities once per GPU, as AMD's exporter reports them: the first
        # partition has them, the others report power 0 and leave the rest out, so a
        # node's sums count the GPU once.
        power = value(got, "gpu_package_power", **ident)
        assert power == (dev.socket_power if p == 0 else 0)
        temp = value(got, "gpu_junction_temperature", **ident)
        assert temp == (dev.temp[1] if p == 0 else None)
        assert (value(got, "pcie_bandwidth", **ident) is None) == (p > 0)
        assert (value(got, "gpu_energy_consumed", **ident) is None) == (p > 0)
    assert value(got, "gpu_nodes_total", hostname=HOST) == 8
    assert not [k for k in got if k[0].startswith("DCGM_")]
