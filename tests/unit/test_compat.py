"""Compat series (outputs.prometheus.compat) rendered from a store view, and workload_labels."""

from __future__ import annotations

import dataclasses
import time

import pytest

from exporter.catalog.device import INFO_LABELS
from exporter.config import load_config
from exporter.errors import ConfigError
from exporter.model import OK, Reading, Snapshot
from exporter.outputs import stamp
from exporter.outputs.compat import Compat, from_config
from exporter.outputs.compat import amd as amd_compat
from exporter.outputs.prometheus import Exposition
from exporter.store import Store
from exporter.verdict import DeviceHealth
from scripts import compat_table as table
from tests.helpers.daemon import samples, value

NV, AMD = "GPU-aaaa", "00ff74a1-0000-1000-80a5-5a1e00000000"
OM = "application/openmetrics-text; version=1.0.0"


def _info(vendor: str, device: str, uuid: str, **labels: str) -> Reading:
    values = dict.fromkeys(INFO_LABELS, "")
    values.update(vendor=vendor, device=device, uuid=uuid, **labels)
    return Reading("accel_device_info", tuple(values[k] for k in INFO_LABELS), 1.0)


def _snapshot(
    name: str, items: list[Reading], age: float = 0.0, health: tuple[DeviceHealth, ...] = ()
) -> Snapshot:
    now = time.time()
    mono = time.monotonic() - age
    return Snapshot(name, tuple(items), OK, now, now, mono, 0.001, 5.0, health=health)


def verdict(ident: tuple[str, str], state: str = "ok", why: str = "") -> DeviceHealth:
    """The judge's record of one device (exporter.verdict)."""
    return DeviceHealth(*ident, state, (), (), "none", 1.0, 1.0, why)


def nvidia(age: float = 0.0) -> Snapshot:
    ident = ("0", NV)
    return _snapshot(
        "nvml",
        [
            _info("nvidia", "0", NV, model="NVIDIA H100", driver_version="580.1"),
            Reading("accel_device_up", ident, 1.0),
            Reading("accel_utilization_ratio", ident, 0.37),
            Reading("accel_memory_used_bytes", ident, 3.0 * (1 << 30)),
            Reading("accel_energy_joules_total", ident, 12.5),
            Reading("accel_clock_hertz", (*ident, "sm"), 1.755e9),
            Reading("accel_xid_last_timestamp_seconds", (*ident, "79"), 200.0),
            Reading("accel_xid_last_timestamp_seconds", (*ident, "13"), 100.0),
        ],
        age,
    )


def amd() -> Snapshot:
    ident = ("0", AMD)
    return _snapshot(
        "amdsmi",
        [
            _info("amd", "0", AMD, serial="S1", compute_partition="SPX"),
            Reading("accel_device_up", ident, 1.0),
            Reading("accel_devices", ("amd",), 1.0),
            Reading("accel_amd_board_info", (*ident, "102-G30211-00"), 1.0),
            Reading("accel_memory_used_bytes", ident, 1.5 * (1 << 20)),
            Reading("accel_energy_joules_total", ident, 2.0),
            Reading("accel_amd_pcie_bandwidth_bytes_per_second", ident, 500e6),
        ],
        health=(verdict(ident),),
    )


def render(store: Store, compat: Compat | None, accept: str | None = None) -> str:
    exposition = Exposition(store, process_metrics=False, compat=compat)
    return exposition.render(accept, None)[0].decode()


def both() -> Compat:
    return Compat(("dcgm", "amd"), "node-1", "lab")


def test_off_adds_nothing():
    store = Store()
    store.put(nvidia())
    store.put(amd())
    assert from_config([], "") is None
    plain = render(store, None)
    assert "DCGM_" not in plain and "gpu_" not in plain
    with_compat = render(store, both())
    # Our own series are byte for byte the same; compat families come after them.
    assert with_compat.startswith(plain)


def test_dcgm_units_labels_and_last_xid():
    store = Store()
    store.put(nvidia())
    got = samples(render(store, both()))
    ident = {"gpu": "0", "UUID": NV, "device": "nvidia0", "modelName": "NVIDIA H100"}
    common = {**ident, "pci_bus_id": "", "Hostname": "node-1", "DCGM_FI_DRIVER_VERSION": "580.1"}
    assert value(got, "DCGM_FI_DEV_GPU_UTIL", **common) == 37  # percent
    assert value(got, "DCGM_FI_DEV_FB_USED", **common) == 3072  # MiB
    assert value(got, "DCGM_FI_DEV_SM_CLOCK", **common) == 1755  # MHz
    # A counter without _total, as dcgm-exporter names it (the parser appends _total).
    assert value(got, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", **common) == 12500  # mJ
    xid = value(
        got, "DCGM_FI_DEV_XID_ERRORS", **common, err_code="79", err_msg="GPU has fallen off the bus"
    )
    assert xid == 79  # the newest XID


def test_amd_units_and_labels():
    store = Store()
    store.put(amd())
    text = render(store, both())
    got = samples(text)
    line = next(x for x in text.splitlines() if x.startswith("gpu_used_vram{"))
    assert 'card_model="102-G30211-00"' in line and 'cluster_name="lab"' in line
    assert 'gpu_compute_partition_type="spx"' in line and 'serial_number="S1"' in line
    used = [v for (n, _), v in got.items() if n == "gpu_used_vram"]
    assert used == [1.5]  # MB
    assert [v for (n, _), v in got.items() if n == "gpu_energy_consumed"] == [2e6]  # uJ
    assert [v for (n, _), v in got.items() if n == "pcie_bandwidth"] == [4000]  # Mb/s
    assert [v for (n, _), v in got.items() if n == "gpu_health"] == [1]
    assert [v for (n, _), v in got.items() if n == "gpu_nodes_total"] == [1]


@pytest.mark.parametrize(
    ("state", "why", "flag"),
    [("ok", "", [1]), ("degraded", "", [0]), ("failed", "", [0]), ("unknown", "reloading", [])],
)
def test_amd_gpu_health_comes_from_the_verdict_record(state, why, flag):
    # The record, not the health families: an unknown device (the exporter cannot vouch
    # for it) has no gpu_health at all, where a 0 would count it unhealthy.
    snap = amd()
    ident = ("0", AMD)
    store = Store()
    store.put(dataclasses.replace(snap, health=(verdict(ident, state, why),)))
    got = samples(render(store, both()))
    assert [v for (n, _), v in got.items() if n == "gpu_health"] == flag


def _amd_held_by_a_pod_and_a_job() -> Snapshot:
    """An AMD GPU with every label AMD's exporter knows set: the widest series it can get."""
    ident = ("0", AMD)
    info = {"serial": "S1", "model": "MI300X", "vbios": "113-M3000100-102"}
    info.update(driver_version="6.8.5", compute_partition="SPX", memory_partition="NPS1")
    return _snapshot(
        "amdsmi",
        [
            _info("amd", "0", AMD, **info),
            _info("amd", "1", "amd-b", serial="S2", model="MI300X"),
            Reading("accel_device_up", ident, 1.0),
            Reading("accel_device_up", ("1", "amd-b"), 1.0),
            Reading("accel_amd_board_info", (*ident, "102-G30211-00"), 1.0),
            Reading("accel_memory_used_bytes", ident, 1.5 * (1 << 20)),
            Reading("accel_memory_used_bytes", ("1", "amd-b"), 2.5 * (1 << 20)),
            Reading("accel_clock_hertz", (*ident, "graphics"), 2.1e9),
            Reading("accel_clock_max_hertz", (*ident, "graphics"), 2.1e9),
            Reading("accel_temperature_celsius", (*ident, "hbm_0"), 50.0),
            Reading("accel_device_workload_info", (*ident, "ml", "train", "main"), 1.0),
            Reading("accel_device_job_info", (*ident, "777", "bob", "gpu"), 1.0),
        ],
        health=(verdict(ident),),
    )


def test_amd_series_leave_empty_labels_out_and_carry_at_most_fifteen():
    store = Store()
    store.put(_amd_held_by_a_pod_and_a_job())
    got = samples(render(store, both()))
    compat = {key: v for key, v in got.items() if not key[0].startswith("accel_")}
    widths = {name: len(labels) for name, labels in compat}
    assert max(widths.values()) == amd_compat.LABEL_LIMIT  # gpu_clock, gpu_max_clock: at the limit
    for name, labels in compat:
        values = dict(labels)
        assert "" not in values.values(), name  # Prometheus stores an empty label as none
        if values["gpu_id"] == "0":
            # The identity, the workload and the index labels are never given up.
            assert {"gpu_uuid", "card_model", "hostname", "cluster_name"} <= values.keys()
            assert values["pod"] == "train" and values["job_id"] == "777", name
    health = dict(next(labels for name, labels in compat if name == "gpu_health"))
    clock = dict(next(labels for name, labels in compat if name == "gpu_clock"))
    # All 19 of AMD's labels are set on this GPU: the per-device series give up four, the
    # per-clock ones (two index labels) two more, in the documented order; the dashboards'
    # label_values variables still find every descriptive label on the per-device series.
    assert not {"job_partition", "job_user"} & set(health)
    assert not {"gpu_memory_partition_type", "gpu_compute_partition_type"} & set(health)
    assert set(health) - set(clock) == {"vbios_version", "card_vendor"}
    assert health["vbios_version"] == "113-M3000100-102" and health["card_vendor"] == "AMD"
    assert clock["serial_number"] == "S1" and clock["clock_type"] == "system"
    # The unattributed GPU: AMD writes pod="" and the rest; here they are simply absent.
    other = dict(next(k[1] for k in compat if k[0] == "gpu_used_vram" and ("gpu_id", "1") in k[1]))
    assert other == {
        "gpu_id": "1",
        "gpu_uuid": "amd-b",
        "serial_number": "S2",
        "card_model": "MI300X",
        "card_series": "MI300X",
        "card_vendor": "AMD",
        "gpu_partition_id": "0",
        "hostname": "node-1",
        "cluster_name": "lab",
    }


def test_fit_gives_up_spare_labels_in_order():
    spare = amd_compat.SPARE
    keep = [(f"keep{i}", "x") for i in range(12)]
    fitted = amd_compat.fit([*keep, *((name, "x") for name in spare)])
    assert [k for k, _ in fitted] == [k for k, _ in keep] + list(spare[-3:])
    assert amd_compat.fit([("a", ""), ("b", "1")]) == [("b", "1")]


def test_a_stale_source_leaves_no_compat_family():
    store = Store()
    store.put(nvidia(age=60.0))  # older than its stale_after: left out of views
    store.put(amd())
    text = render(store, both())
    assert "DCGM_" not in text  # no stale value, no zero, not even a header
    assert "gpu_used_vram{" in text


def test_openmetrics_types_counters_without_total_as_unknown():
    store = Store()
    store.put(nvidia())
    text = render(store, both(), OM)
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n" in text
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" in text
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1


def test_names_filter_applies_to_compat_families():
    store = Store()
    store.put(nvidia())
    exposition = Exposition(store, process_metrics=False, compat=both())
    body = exposition.render(None, None, names=["DCGM_FI_DEV_GPU_UTIL"])[0].decode()
    assert "DCGM_FI_DEV_GPU_UTIL{" in body and "DCGM_FI_DEV_FB_USED" not in body
    assert "accel_" not in body


def test_unknown_compat_name_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError) as err:
        load_config(env={"ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__COMPAT": "dcgm,nvidia"})
    assert "outputs.prometheus.compat.1" in str(err.value)
    assert "'dcgm' | 'dcgm@4.8' | 'dcgm@4.9' | 'dcgm@4.10' | 'amd'" in str(err.value)
    config = load_config(overrides={"outputs.prometheus.compat": "amd,dcgm"})
    assert config.outputs.prometheus.compat == ["amd", "dcgm"]


def test_workload_labels_stamp_pod_and_slurm_job():
    store = Store()
    ident = ("0", NV)
    store.put(
        _snapshot(
            "nvml",
            [
                _info("nvidia", "0", NV),
                _info("nvidia", "1", "GPU-b"),
                Reading("accel_utilization_ratio", ident, 0.5),
                Reading("accel_utilization_ratio", ("1", "GPU-b"), 0.25),
                Reading("accel_device_workload_info", (*ident, "ml", "train", "main"), 1.0),
                Reading("accel_device_job_info", ("1", "GPU-b", "777", "bob", "gpu"), 1.0),
            ],
        )
    )
    config = load_config(overrides={"outputs.prometheus.workload_labels": "true"})
    factory = stamp.from_config(config)
    body = Exposition(store, process_metrics=False, stamp=factory).render(None, None)[0]
    got = samples(body.decode())
    pod = {"namespace": "ml", "pod": "train", "container": "main", "job_id": ""}
    assert value(got, "accel_utilization_ratio", device="0", uuid=NV, **pod) == 0.5
    job = {"namespace": "", "pod": "", "container": "", "job_id": "777"}
    assert value(got, "accel_utilization_ratio", device="1", uuid="GPU-b", **job) == 0.25


def test_the_table_covers_both_default_lists():
    from pathlib import Path

    fixtures = Path(__file__).parents[1] / "fixtures" / "compat"
    csv = (fixtures / "dcgm-exporter" / "default-counters.csv").read_text().splitlines()
    dcgm_fields = {
        line.split(",")[0].strip() for line in csv if line.strip() and not line.startswith("#")
    }
    amd_fields = {
        line.strip()
        for line in (fixtures / "device-metrics-exporter" / "gpu-metric-fields.txt")
        .read_text()
        .splitlines()
        if line.strip() and not line.startswith("#")
    }
    rows = table.rows()
    assert {r.field for r in rows if r.exporter == table.DCGM} == dcgm_fields
    assert {r.field for r in rows if r.exporter == table.AMD} == amd_fields
    assert all(r.served or r.note for r in rows)  # every field not served says why
