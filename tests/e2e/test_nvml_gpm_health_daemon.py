"""GPM figures, the recovery action and the health verdict through the real daemon,
its nvml worker and the real pynvml, against the fake libnvidia-ml.so.1."""

from __future__ import annotations

from tests.e2e.test_nvml_daemon import nvml_config
from tests.fakes.nvml.control import GPM_KNOWN, NOT_SUPPORTED
from tests.helpers.daemon import samples, value
from tests.helpers.promtool import check_metrics

# metric id -> (family, extra labels) of every GPM figure exported.
RATIOS = {
    1: ("accel_graphics_engine_active_ratio", {}),
    2: ("accel_sm_active_ratio", {}),
    3: ("accel_sm_occupancy_ratio", {}),
    4: ("accel_pipe_active_ratio", {"pipe": "integer"}),
    5: ("accel_pipe_active_ratio", {"pipe": "tensor"}),
    6: ("accel_pipe_active_ratio", {"pipe": "tensor_dfma"}),
    7: ("accel_pipe_active_ratio", {"pipe": "tensor_hmma"}),
    8: ("accel_pipe_active_ratio", {"pipe": "tensor_dmma"}),
    9: ("accel_pipe_active_ratio", {"pipe": "tensor_imma"}),
    10: ("accel_dram_active_ratio", {}),
    11: ("accel_pipe_active_ratio", {"pipe": "fp64"}),
    12: ("accel_pipe_active_ratio", {"pipe": "fp32"}),
    13: ("accel_pipe_active_ratio", {"pipe": "fp16"}),
    **{30 + k: ("accel_engine_utilization_ratio", {"engine": f"nvdec{k}"}) for k in range(8)},
    **{40 + k: ("accel_engine_utilization_ratio", {"engine": f"nvjpg{k}"}) for k in range(8)},
    50: ("accel_engine_utilization_ratio", {"engine": "ofa0"}),
    51: ("accel_engine_utilization_ratio", {"engine": "ofa1"}),
    **{166 + k: ("accel_engine_utilization_ratio", {"engine": f"nvenc{k}"}) for k in range(4)},
}
RATES = {
    20: "accel_pcie_tx_average_bytes_per_second",
    21: "accel_pcie_rx_average_bytes_per_second",
    60: "accel_nvlink_rx_average_bytes_per_second",
    61: "accel_nvlink_tx_average_bytes_per_second",
}
FAMILIES = {f for f, _ in RATIOS.values()} | set(RATES.values())


def percent(gpu: int, metric: int) -> float:
    """A distinct scenario value per GPU and metric, with a fraction."""
    return (gpu * 11 + metric * 3) % 97 + 0.125


def test_gpm_families_on_eight_gpus_exact(daemon_factory, fake_nvml):
    fake = fake_nvml(8)
    for gpu in range(8):
        fake.set_gpm(gpu, {m: percent(gpu, m) for m in GPM_KNOWN})
    fake.set_gpm(3, status={3: NOT_SUPPORTED})  # no SM occupancy on GPU 3 only
    fake.device(6).gpm_supported = 0  # a pre-Hopper GPU
    d = daemon_factory(nvml_config(), env=fake.env())
    u = [fake.uuid(i) for i in range(8)]
    d.wait_metric("accel_sm_active_ratio", percent(7, 2) / 100, device="7", uuid=u[7])
    text = d.metrics()
    s = samples(text)
    for gpu in range(8):
        ident = {"device": str(gpu), "uuid": u[gpu]}
        for metric, (family, labels) in RATIOS.items():
            got = value(s, family, **ident, **labels)
            if gpu == 6 or (gpu == 3 and metric == 3):
                assert got is None, (gpu, family, labels)
            else:
                assert got == percent(gpu, metric) / 100, (gpu, family, labels)
        for metric, family in RATES.items():
            got = value(s, family, **ident)
            assert got == (None if gpu == 6 else percent(gpu, metric) * 2**20), (gpu, family)
    # The pre-Hopper GPU: up, no GPM series, no errors; none anywhere else either.
    assert value(s, "accel_device_up", device="6", uuid=u[6]) == 1
    assert not [k for k in s if k[0] in FAMILIES and dict(k[1])["device"] == "6"]
    assert not [k for k in s if k[0] == "accel_field_errors_total"]
    check_metrics(text)


def test_recovery_action_node_reboot_makes_the_device_failed(daemon_factory, fake_nvml):
    fake = fake_nvml(2)
    d = daemon_factory(nvml_config(), env=fake.env())
    u1 = fake.uuid(1)
    one = {"device": "1", "uuid": u1}
    d.wait_metric("accel_device_health", 1, state="ok", **one)
    d.wait_metric("accel_device_recovery_action", 1, action="none", **one)
    fake.device(1).recovery_action = 2  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    d.wait_metric("accel_device_health", 1, state="failed", **one)
    s = samples(d.metrics())
    assert value(s, "accel_device_recovery_action", action="node_reboot", **one) == 1
    assert value(s, "accel_device_recovery_action", action="none", **one) == 0
    assert value(s, "accel_device_health_reason_info", reason="recovery_action", **one) == 1
    for state in ("ok", "degraded", "predicted_failure"):
        assert value(s, "accel_device_health", state=state, **one) == 0
    assert value(s, "accel_device_health", state="ok", device="0", uuid=fake.uuid(0)) == 1
    # The GPU lost: still failed, now for that reason too.
    fake.device(1).lost = 1
    d.wait_metric("accel_device_health_reason_info", 1, reason="device_down", **one)
    assert value(d.metrics(), "accel_device_health", state="failed", **one) == 1


def test_rank_to_gpu_join_through_the_daemon(daemon_factory, fake_nvml):
    from tests.helpers.fake_ras import ThreadedFakeRas
    from tests.helpers.ras_reports import make_job

    fake = fake_nvml(4)
    job = make_job(2, 4)  # ranks 0..3 on 10.0.0.1 (this node), 4..7 elsewhere
    for comm in job.comms:
        for rank in comm.ranks:
            rank.nvml_dev = 3 - rank.cuda_dev
    with ThreadedFakeRas("2.29", job) as server:
        config = nvml_config()
        config["sources"]["ccl_ras"] = {
            "enabled": True,
            "addresses": [server.address],
            "interval": "300ms",
            "timeout": "2s",
            "local_addresses": ["10.0.0.1"],
            "monitor": False,
        }
        d = daemon_factory(config, env=fake.env())
        labels = {"address": server.address, "comm": "3b2fe521bf43bc04"}
        d.wait_metric(
            "accel_ccl_rank_device_info",
            1,
            **labels,
            rank="0",
            device="3",
            uuid=fake.uuid(3),
            pid="10000",
        )
        s = samples(d.metrics())
    joined = sorted(
        (dict(k[1])["rank"], dict(k[1])["device"], dict(k[1])["uuid"])
        for k in s
        if k[0] == "accel_ccl_rank_device_info"
    )
    assert joined == [(str(r), str(3 - r), fake.uuid(3 - r)) for r in range(4)]
