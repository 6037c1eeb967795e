"""dcgm-exporter releases 4.8, 4.9 and 4.10 served from one store view (compat: [dcgm@...])."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.config import load_config
from exporter.errors import ConfigError
from exporter.model import Reading
from exporter.outputs.compat import Compat, from_config
from exporter.outputs.compat.dcgm_table import served_units, unit_conflicts
from exporter.outputs.compat.dcgm_versions import VERSIONS
from exporter.outputs.prometheus_setup import compat_readings
from exporter.store import Store
from tests.helpers.daemon import samples, value
from tests.unit.test_compat import NV, nvidia, render


def _store(extra: tuple[Reading, ...] = ()) -> Store:
    snap = nvidia()
    store = Store()
    store.put(dataclasses.replace(snap, readings=(*snap.readings, *extra)))
    return store


IDENT = {"gpu": "0", "UUID": NV, "device": "nvidia0", "modelName": "NVIDIA H100"}
BASE = {**IDENT, "pci_bus_id": "", "Hostname": "node-1"}
TOTAL = Reading("accel_memory_total_bytes", ("0", NV), 80.0 * (1 << 30))


def _got(*entries: str) -> dict:
    return samples(render(_store((TOTAL,)), Compat(entries, "node-1")))


def test_4_9_names_units_and_driver_label():
    got = _got("dcgm@4.9")
    labels = {**BASE, "DCGM_FI_SYSTEM_DRIVER_VERSION": "580.1"}
    assert value(got, "DCGM_FI_DEV_GPU_UTIL_RATIO", **labels) == 0.37  # 0-1, no longer %
    assert value(got, "DCGM_FI_DEV_FB_CAPACITY_BYTES", **labels) == 80.0 * (1 << 30)
    no_error = {**labels, "err_code": "79", "err_msg": "GPU has fallen off the bus"}
    assert value(got, "DCGM_FI_DEV_XID_ERROR", **no_error) == 79
    names = {n for n, _ in got}
    # The legacy names are gone, and so is the legacy driver label.
    assert not names & {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS"}
    assert all("DCGM_FI_DRIVER_VERSION" not in dict(k) for n, k in got if n.startswith("DCGM"))
    # A unit-changing field whose 4.7 name we could not source is not served at all.
    assert not names & {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_MEM_COPY_UTIL"}


def _raw(text: str, name: str) -> list[float]:
    # The exposition's own values: prometheus_client's parser would rename a counter
    # sample that ends in upper-case _TOTAL to ..._TOTAL_total, Prometheus does not.
    return [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(name + "{")]


def test_4_9_and_4_10_clocks_in_hz_and_energy_in_j():
    mem = Reading("accel_clock_hertz", ("0", NV, "memory"), 2.619e9)
    labels = {**BASE, "DCGM_FI_SYSTEM_DRIVER_VERSION": "580.1"}
    for entry in ("dcgm@4.9", "dcgm@4.10"):
        text = render(_store((mem,)), Compat((entry,), "node-1"))
        got = samples(text)
        # New base-unit field ids (go-dcgm 1603, 1604, 1611): our values unscaled.
        assert value(got, "DCGM_FI_DEV_SM_CLOCK_HERTZ", **labels) == 1.755e9
        assert value(got, "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", **labels) == 2.619e9
        assert _raw(text, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL") == [12.5]
        assert "# TYPE DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL counter" in text
        assert "# TYPE DCGM_FI_DEV_SM_CLOCK_HERTZ gauge" in text
        for old in ("SM_CLOCK", "MEM_CLOCK", "TOTAL_ENERGY_CONSUMPTION"):
            assert _raw(text, f"DCGM_FI_DEV_{old}") == []
    # Next to 4.8 each is served in its own unit, under its own name.
    text = render(_store((mem,)), Compat(("dcgm@4.8", "dcgm@4.10"), "node-1"))
    assert _raw(text, "DCGM_FI_DEV_SM_CLOCK") == [1755]  # MHz
    assert _raw(text, "DCGM_FI_DEV_MEM_CLOCK") == [2619]
    assert _raw(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == [12500]  # mJ
    assert _raw(text, "DCGM_FI_DEV_SM_CLOCK_HERTZ") == [1.755e9]
    assert _raw(text, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL") == [12.5]


def test_the_six_unsourced_fields_stay_out_with_their_reason():
    for version in ("4.9", "4.10"):
        dropped = VERSIONS[version].dropped
        assert sorted(dropped) == sorted(
            f"DCGM_FI_DEV_{n}"
            for n in ("MEM_COPY_UTIL", "ENC_UTIL", "DEC_UTIL", "FB_FREE", "FB_USED", "FB_RESERVED")
        )
        assert all("go-dcgm" in why for why in dropped.values())
        assert not served_units(version).keys() & dropped.keys()


def test_4_10_renames_pcie_bytes():
    pcie = Reading("accel_pcie_tx_average_bytes_per_second", ("0", NV), 2.5e9)
    got = samples(render(_store((pcie,)), Compat(("dcgm@4.10",), "node-1")))
    labels = {**BASE, "DCGM_FI_SYSTEM_DRIVER_VERSION": "580.1"}
    assert value(got, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", **labels) == 2.5e9
    assert "DCGM_FI_PROF_PCIE_TX_BYTES" not in {n for n, _ in got}
    got_49 = samples(render(_store((pcie,)), Compat(("dcgm@4.9",), "node-1")))
    assert value(got_49, "DCGM_FI_PROF_PCIE_TX_BYTES", **labels) == 2.5e9


def test_xid_served_at_zero_before_the_first_event_in_every_version():
    snap = nvidia()
    store = Store()
    readings = tuple(r for r in snap.readings if r.metric != "accel_xid_last_timestamp_seconds")
    store.put(dataclasses.replace(snap, readings=readings))
    for entry, name in (
        ("dcgm@4.8", "DCGM_FI_DEV_XID_ERRORS"),
        ("dcgm@4.10", "DCGM_FI_DEV_XID_ERROR"),
    ):
        got = samples(render(store, Compat((entry,), "node-1")))
        found = [v for (n, k), v in got.items() if n == name and dict(k)["err_msg"] == "No Error"]
        assert found == [0]


def test_two_versions_at_once_serve_each_name_once_and_say_so():
    text = render(_store((TOTAL,)), Compat(("dcgm@4.8", "dcgm@4.10"), "node-1"))
    got = samples(text)
    assert value(got, "DCGM_FI_DEV_GPU_UTIL", **BASE, DCGM_FI_DRIVER_VERSION="580.1") == 37
    assert value(got, "DCGM_FI_DEV_GPU_UTIL_RATIO", **BASE, DCGM_FI_SYSTEM_DRIVER_VERSION="580.1")
    heads = [x for x in text.splitlines() if x.startswith("# TYPE DCGM_")]
    assert len(heads) == len(set(heads))
    compat = Compat(("dcgm@4.8", "dcgm@4.10"), "node-1")
    info = [r.labels for r in compat_readings(compat) if r.metric == "accel_compat_info"]
    assert info == [("dcgm", "4.8"), ("dcgm", "4.10")]


def test_dcgm_and_its_pin_are_one_vocabulary():
    compat = from_config(["dcgm", "dcgm@4.8", "amd"], "")
    assert compat is not None and len(compat.names) == 2


def test_no_pair_of_known_releases_clashes_in_units():
    # Every name two releases share is the same series (same unit): served once.
    assert unit_conflicts(["dcgm@4.8", "dcgm@4.9", "dcgm@4.10"]) == []


def test_unknown_version_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as err:
        load_config(env={"ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__COMPAT": "dcgm@4.11"})
    assert "outputs.prometheus.compat.0" in str(err.value)
    assert "'dcgm@4.9' | 'dcgm@4.10'" in str(err.value)


def test_two_versions_load_from_config():
    config = load_config(env={"ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__COMPAT": "dcgm@4.8,dcgm@4.10"})
    assert config.outputs.prometheus.compat == ["dcgm@4.8", "dcgm@4.10"]


def test_a_name_two_releases_share_is_written_once_with_the_newer_labels():
    pcie = Reading("accel_pcie_tx_average_bytes_per_second", ("0", NV), 2.5e9)
    got = samples(render(_store((pcie,)), Compat(("dcgm@4.8", "dcgm@4.9"), "node-1")))
    found = [dict(k) for (n, k), _ in got.items() if n == "DCGM_FI_PROF_PCIE_TX_BYTES"]
    assert len(found) == 1
    assert "DCGM_FI_SYSTEM_DRIVER_VERSION" in found[0]
    assert "DCGM_FI_DRIVER_VERSION" not in found[0]
