"""``accel-exporter --demo``: simulated GPUs through the real worker, catalog and outputs.

No fake library and no compiler: the daemon runs the demo backend in a worker like any
vendor's. Every default-profile device family of an H100 node is served for each GPU,
each device series says it is simulated, /status says so, and the health verdict and
its check work on the one degraded GPU.
"""

from __future__ import annotations

import json
import subprocess

from exporter.backends import demo
from exporter.catalog import device, nvidia, totals
from exporter.catalog.profiles import members
from exporter.cli import main
from tests.helpers.cli import cli_command, cli_env
from tests.helpers.daemon import samples

GPUS = [demo.uuid(i) for i in range(demo.DEVICES)]

# Default-profile families of the simulated GPU's kind that a healthy node does not show,
# each for its reason (docs/demo.md says the same).
NOT_SERVED = {
    # Only while a device is down, isolated, failing a field or in a peer domain.
    "accel_device_down_reason_info",
    "accel_device_isolated_info",
    "accel_device_isolated_since_timestamp_seconds",
    "accel_field_errors_total",
    "accel_device_domain_info",
    # Only while a finding holds: the degraded GPU's, checked on their own below.
    "accel_device_health_reason_info",
    "accel_device_action_reason_info",
    "accel_device_action_scope_info",
    # Only after an event or an XID (the demo has none: ECC and XID stay 0).
    "accel_device_event_last_timestamp_seconds",
    "accel_xid_errors_total",
    "accel_xid_last_timestamp_seconds",
    # Only once the noisy-signal registry lowered a trend rule (docs/health.md, Trends).
    "accel_health_signal_downgraded_total",
    # Per link only once a link counted an error (the per-device totals are served).
    "accel_nvlink_errors_total",
    # MIG is off on the simulated GPUs.
    "accel_mig_device_info",
    "accel_mig_memory_total_bytes",
    "accel_mig_memory_used_bytes",
    "accel_mig_memory_free_bytes",
    "accel_mig_utilization_ratio",
    "accel_mig_memory_bandwidth_utilization_ratio",
    # Per-process series are opt-in (sources.nvml.processes): the second test turns them on.
    "accel_processes",
    "accel_process_memory_bytes",
    "accel_process_info",
    "accel_process_sm_utilization_ratio",
    "accel_process_memory_utilization_ratio",
    "accel_process_encoder_utilization_ratio",
    "accel_process_decoder_utilization_ratio",
}
PROCESS_FAMILIES = {name for name in NOT_SERVED if name.startswith(("accel_process",))}


def expected_families() -> set[str]:
    """The default profile's device families of NVIDIA GPUs (shared, NVIDIA's, NVLink totals)."""
    default = members("default")
    rows = [*device.ROWS, *nvidia.ROWS, *(r for r in totals.ROWS if "nvlink" in r.name)]
    return {r.name for r in rows if r.name in default and r.labels[:2] == ("device", "uuid")}


def served(text: str) -> dict[str, set[str]]:
    """Family (counters without ``_total``, as the catalog names them) -> the uuids it has."""
    out: dict[str, set[str]] = {}
    for (name, labels), _ in samples(text).items():
        uuid = dict(labels).get("uuid")
        if uuid is not None:
            out.setdefault(name, set()).add(uuid)
    return out


def uuids_of(by_family: dict[str, set[str]], family: str) -> set[str]:
    return by_family.get(family) or by_family.get(family.removesuffix("_total"), set())


def wait_for_every_gpu(d) -> dict:
    def all_listed():
        doc = json.loads(d.get("/v1/devices").text)
        return doc if len(doc["devices"]) == len(GPUS) else None

    return d.wait_for(all_listed, what="every simulated GPU's verdict", timeout=60)


def test_demo_serves_every_device_family_labelled_as_simulated(daemon_factory, capsys):
    d = daemon_factory({"sources": {"host": {"interval": "1s"}}}, args=["--demo"])
    doc = wait_for_every_gpu(d)
    text = d.metrics()
    by_family = served(text)
    expected = expected_families() - NOT_SERVED
    assert len(expected) > 50, sorted(expected)
    missing = {f: sorted(set(GPUS) - uuids_of(by_family, f)) for f in sorted(expected)}
    assert {f: m for f, m in missing.items() if m} == {}
    # Simulated, where a dashboard shows it: every device series carries a DEMO- uuid,
    # the identity says vendor "demo" and names the demo in its model.
    assert {u for uuids in by_family.values() for u in uuids} == set(GPUS)
    info = [
        dict(labels) for (name, labels), _ in samples(text).items() if name == "accel_device_info"
    ]
    assert len(info) == len(GPUS)
    assert all(i["vendor"] == "demo" and "--demo" in i["model"] for i in info), info
    assert 'accel_exporter_source_up{source="demo"} 1' in text
    # No vendor source runs beside the demo (a GPU node would otherwise mix real and
    # simulated devices).
    status = d.status()
    assert status["simulated"] == ["demo"]
    assert status["sources"]["demo"]["simulated"] is True
    assert not {"nvml", "amdsmi", "levelzero", "hlml", "tpu", "neuron"} & set(status["sources"])
    # The health verdict: one GPU degraded by its pending row remapping, the others ok.
    verdicts = {e["uuid"]: e["verdict"] for e in doc["devices"]}
    degraded = demo.uuid(demo.DEGRADED)
    assert verdicts == {u: ("degraded" if u == degraded else "ok") for u in GPUS}
    reasons = {
        dict(labels)["reason"]
        for (name, labels), v in samples(text).items()
        if name == "accel_device_health_reason_info" and v == 1
    }
    assert reasons == {"row_remap_pending"}
    # The check an NPD or Slurm would run says the same.
    status_code = main(["check", "health", "--url", d.url])
    out = capsys.readouterr().out
    assert status_code == 1 and f"gpu{demo.DEGRADED} degraded (row_remap_pending)" in out, out


def test_demo_values_move_and_processes_are_opt_in(daemon_factory):
    d = daemon_factory(
        {"sources": {"nvml": {"interval": "1s", "processes": True}}}, args=["--demo"]
    )
    wait_for_every_gpu(d)

    def energy() -> dict[str, float]:
        return {
            dict(labels)["uuid"]: v
            for (name, labels), v in samples(d.metrics()).items()
            if name == "accel_energy_joules_total"
        }

    first = d.wait_for(lambda: (e := energy()) and len(e) == len(GPUS) and e, what="energy")
    # Energy is the integral of power: it grows on every GPU from one poll to the next.
    d.wait_for(
        lambda: all(v > first[u] for u, v in energy().items()), what="energy grows", timeout=30
    )
    by_family = served(d.metrics())
    assert {f: sorted(set(GPUS) - uuids_of(by_family, f)) for f in PROCESS_FAMILIES} == {
        f: [] for f in PROCESS_FAMILIES
    }


def test_demo_is_for_the_daemon_only():
    proc = subprocess.run(
        cli_command("--demo", "once"), env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--demo runs the daemon" in proc.stderr, proc.stderr
