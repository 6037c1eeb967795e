"""dcgm-exporter 4.8 and 4.10 at once, 4.9 alone, and a users' collectors CSV, on Prometheus.

No upstream 4.9.0/4.10.0 dashboard or CSV could be had (the stored NVIDIA/dcgm-exporter
snapshot ends at 4.5.3-4.8.2): the 4.9 and 4.10 sides are replayed from their name/unit tables
(exporter/outputs/compat/dcgm_versions.py, sources named there and in
tests/fixtures/compat/README.md). The 4.8 dashboard (the upstream fixture) is run
unchanged next to it: a fleet mid-upgrade keeps answering both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.outputs.compat.dcgm_table import served_units
from tests.e2e.test_compat_prometheus import (
    GPM,
    HOST,
    MIB,
    _answered,
    _run_dcgm_dashboard,
    check_compat_metrics,
    value,
    wait_series,
)
from tests.e2e.test_prometheus_server import Prometheus, wait_until
from tests.helpers.daemon import samples

CSV = """\
# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_PROF_SM_ACTIVE, gauge, Ratio of cycles an SM has at least 1 warp assigned.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_SERIAL, label, Device serial number.
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
"""


def _daemon(daemon_factory: Any, nv: Any, prometheus: dict[str, Any]) -> Any:
    quiet = {n: {"enabled": False} for n in ("host", "amdsmi", "ccl_ras", "ccl_inspector")}
    config = {
        "sources": {**quiet, "nvml": {"interval": "1s", "slow_interval": "1s"}},
        "outputs": {"prometheus": prometheus},
    }
    return daemon_factory(config, env={**nv.env(), "NODE_NAME": HOST})


@pytest.mark.timeout(240)
def test_4_8_and_4_10_at_once_on_prometheus(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    nv = fake_nvml(2)
    nv.set_gpm(0, GPM)
    d = _daemon(daemon_factory, nv, {"compat": ["dcgm@4.8", "dcgm@4.10"]})
    wait_series(d, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", GPM[1] / 100, gpu="0")
    text = d.metrics()
    got = samples(text)
    dev = nv.device(0)
    new = {"gpu": "0", "UUID": nv.uuid(0), "Hostname": HOST}
    driver = nv.state.driver_version.decode()
    # 4.10's units: ratios 0..1, bytes, B/s; its driver-version label.
    assert value(got, "DCGM_FI_DEV_GPU_UTIL_RATIO", **new) == dev.util_gpu / 100
    assert value(got, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", **new) == dev.temperature_gpu
    assert value(got, "DCGM_FI_DEV_BOARD_POWER_WATTS", **new) == dev.power_mw / 1000
    assert value(got, "DCGM_FI_DEV_FB_CAPACITY_BYTES", **new) == dev.memory_total
    assert value(got, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", **new) == GPM[20] * MIB
    assert value(got, "DCGM_FI_PROF_TENSOR_UTIL_RATIO", **new) == GPM[5] / 100
    xid = {**new, "err_code": "0", "err_msg": "No Error"}
    assert value(got, "DCGM_FI_DEV_XID_ERROR", **xid) == 0  # before any XID: no blank panel
    _base_units(nv, got, new)
    labels = dict(next(k for k in got if k[0] == "DCGM_FI_DEV_GPU_TEMP_CELSIUS")[1])
    assert labels["DCGM_FI_SYSTEM_DRIVER_VERSION"] == driver
    assert "DCGM_FI_DRIVER_VERSION" not in labels
    # 4.8's, side by side, in its own units and label.
    old = dict(next(k for k in got if k[0] == "DCGM_FI_DEV_GPU_TEMP")[1])
    assert old["DCGM_FI_DRIVER_VERSION"] == driver
    assert value(got, "DCGM_FI_DEV_GPU_UTIL", **new) == dev.util_gpu
    # Every family once; both versions said.
    heads = [x for x in text.splitlines() if x.startswith("# TYPE DCGM_")]
    assert len(heads) == len(set(heads))
    info = {dict(k)["version"] for (n, k), _ in got.items() if n == "accel_compat_info"}
    assert info == {"4.8", "4.10"}
    check_compat_metrics(text)
    host, port = d.address
    prom = Prometheus(tmp_path, f"{host}:{port}").start()
    try:
        wait_until(
            lambda: len(prom.query("count_over_time(DCGM_FI_DEV_GPU_TEMP_CELSIUS[30s]) > 2")) == 2,
            "several scrapes of every GPU",
        )
        _run_dcgm_dashboard(prom, f"{host}:{port}")  # the 4.8 dashboard, unchanged
        # Every 4.10 default we serve answers on Prometheus (the XID family at 0 included).
        for name in served_units("4.10"):
            if name in ("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",):
                continue  # the fake GPU has no memory sensor (as in DCGM)
            _answered(prom, f'{name}{{gpu="0"}}', "4.10 table")
        found = prom.query('DCGM_FI_DEV_GPU_UTIL_RATIO{gpu="0"}')
        assert float(found[0]["value"][1]) == dev.util_gpu / 100
        _base_units_on(prom, nv)
    finally:
        prom.stop()


def _base_units(nv: Any, got: dict[Any, float], labels: dict[str, str]) -> None:
    """The clocks in Hz and the energy in J (DCGM's base-unit fields 1603, 1604, 1611)."""
    dev = nv.device(0)
    assert value(got, "DCGM_FI_DEV_SM_CLOCK_HERTZ", **labels) == dev.clock_mhz[1] * 1_000_000
    assert value(got, "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", **labels) == dev.clock_mhz[2] * 1_000_000
    # prometheus_client's parser names a counter's sample <name>_total; Prometheus does not.
    joules = value(got, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL_total", **labels)
    assert joules is not None
    assert dev.energy_mj - 100 * dev.energy_step_mj <= joules * 1000 <= dev.energy_mj  # J


def _base_units_on(prom: Prometheus, nv: Any) -> None:
    """The same three answered on Prometheus, as a dashboard moved to them would ask."""
    dev = nv.device(0)
    for name, mhz in (
        ("DCGM_FI_DEV_SM_CLOCK_HERTZ", dev.clock_mhz[1]),
        ("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", dev.clock_mhz[2]),
    ):
        found = prom.query(f'{name}{{gpu="0"}}')
        assert [float(f["value"][1]) for f in found] == [mhz * 1_000_000], name
    _answered(prom, 'rate(DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{gpu="0"}[30s])', "energy in J")


@pytest.mark.timeout(180)
def test_4_9_alone_on_prometheus(daemon_factory: Any, fake_nvml: Any, tmp_path: Path) -> None:
    nv = fake_nvml(2)
    nv.set_gpm(0, GPM)
    d = _daemon(daemon_factory, nv, {"compat": ["dcgm@4.9"]})
    wait_series(d, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", GPM[1] / 100, gpu="0")
    text = d.metrics()
    got = samples(text)
    dev = nv.device(0)
    new = {"gpu": "0", "UUID": nv.uuid(0), "Hostname": HOST}
    # 4.9's units and label; its PCIe bytes keep the 4.8 name (renamed in 4.10).
    assert value(got, "DCGM_FI_DEV_GPU_UTIL_RATIO", **new) == dev.util_gpu / 100
    assert value(got, "DCGM_FI_DEV_FB_CAPACITY_BYTES", **new) == dev.memory_total
    assert value(got, "DCGM_FI_PROF_PCIE_TX_BYTES", **new) == GPM[20] * MIB
    _base_units(nv, got, new)
    names = {n for n, _ in got if n.startswith("DCGM_")}
    assert "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND" not in names
    # No 4.8 name is served, the unsourced six included.
    assert not names & {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
    }
    labels = dict(next(k for k in got if k[0] == "DCGM_FI_DEV_GPU_TEMP_CELSIUS")[1])
    assert labels["DCGM_FI_SYSTEM_DRIVER_VERSION"] == nv.state.driver_version.decode()
    info = {dict(k)["version"] for (n, k), _ in got.items() if n == "accel_compat_info"}
    assert info == {"4.9"}
    check_compat_metrics(text)
    host, port = d.address
    prom = Prometheus(tmp_path, f"{host}:{port}").start()
    try:
        wait_until(
            lambda: len(prom.query("count_over_time(DCGM_FI_DEV_GPU_TEMP_CELSIUS[30s]) > 2")) == 2,
            "several scrapes of every GPU",
        )
        for name in served_units("4.9"):
            if name in ("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",):
                continue  # the fake GPU has no memory sensor (as in DCGM)
            _answered(prom, f'{name}{{gpu="0"}}', "4.9 table")
        _base_units_on(prom, nv)
    finally:
        prom.stop()


@pytest.mark.timeout(120)
def test_a_users_collectors_csv(daemon_factory: Any, fake_nvml: Any, tmp_path: Path) -> None:
    path = tmp_path / "custom.csv"
    path.write_text(CSV)
    nv = fake_nvml(1)
    nv.set_gpm(0, {**GPM, 2: 55.0})  # GPM metric 2: SM_UTIL (DCGM PROF_SM_ACTIVE)
    d = _daemon(daemon_factory, nv, {"compat": ["dcgm"], "compat_fields": {"dcgm": str(path)}})
    wait_series(d, "DCGM_FI_PROF_SM_ACTIVE", 0.55, gpu="0")
    wait_series(d, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPM[5] / 100, gpu="0")
    got = samples(d.metrics())
    dev = nv.device(0)
    serial = dict(next(k for k in got if k[0] == "DCGM_FI_DEV_GPU_TEMP")[1])["DCGM_FI_DEV_SERIAL"]
    assert serial == dev.serial.decode()
    assert value(got, "DCGM_FI_DEV_GPU_TEMP", gpu="0") == dev.temperature_gpu
    names = {n for n, _ in got if n.startswith("DCGM_")}
    # The file's fields only, under its names (the defaults it leaves out are not served).
    assert names == {
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_GPU_TEMP",
    }
    unserved = [dict(k) for (n, k), _ in got.items() if n == "accel_compat_field_unserved_info"]
    assert [u["field"] for u in unserved] == ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
