"""The users' dcgm-exporter collectors CSV (outputs.prometheus.compat_fields.dcgm)."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.catalog.device import INFO_LABELS
from exporter.config import load_config
from exporter.errors import ConfigError
from exporter.model import Reading
from exporter.outputs.compat import Compat, from_config
from exporter.outputs.compat.dcgm_csv import CsvError, load, parse, select
from exporter.outputs.prometheus_setup import UNSERVED, compat_readings
from exporter.store import Store
from tests.helpers.daemon import samples, value
from tests.unit.test_compat import NV, nvidia, render

# As sites write them: padded cells, comments, blank lines, a label row, DCP fields.
CSV = """\
# Format
# DCGM FIELD, Prometheus metric type, help message

DCGM_FI_DEV_GPU_UTIL,            gauge, GPU utilization (in %).
DCGM_FI_PROF_SM_ACTIVE,          gauge, Ratio of cycles an SM has at least 1 warp assigned.
DCGM_FI_PROF_SM_OCCUPANCY,       gauge, Ratio of warps resident to the theoretical maximum.
DCGM_FI_PROF_PIPE_FP16_ACTIVE,   gauge, Ratio of cycles the fp16 pipes are active.
DCGM_FI_PROF_NVLINK_TX_BYTES,    gauge, NVLink bytes transmitted per second.
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, gauge, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_VBIOS_VERSION,       label, VBIOS version of the device.
DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Current clock event reasons.
DCGM_FI_PROF_SM_ACTIVE,          gauge, listed twice.
"""
ID = ("0", NV)
EXTRA = (
    Reading("accel_sm_active_ratio", ID, 0.5),
    Reading("accel_sm_occupancy_ratio", ID, 0.25),
    Reading("accel_pipe_active_ratio", (*ID, "fp16"), 0.125),
    Reading("accel_nvlink_tx_average_bytes_per_second", ID, 3e9),
)


def _store() -> Store:
    snap = nvidia()
    info = tuple(
        dataclasses.replace(
            r,
            labels=tuple(
                "96.00.1" if i == INFO_LABELS.index("vbios") else v for i, v in enumerate(r.labels)
            ),
        )
        if r.metric == "accel_device_info"
        else r
        for r in snap.readings
    )
    store = Store()
    store.put(dataclasses.replace(snap, readings=(*info, *EXTRA)))
    return store


def test_a_custom_csv_is_served_as_written(tmp_path):
    path = tmp_path / "custom.csv"
    path.write_text(CSV)
    compat = from_config(["dcgm"], "", dcgm_fields=load(str(path)))
    assert compat is not None
    text = render(_store(), dataclasses.replace(compat, hostname="node-1"))
    got = samples(text)
    labels = {
        "gpu": "0", "UUID": NV, "device": "nvidia0", "modelName": "NVIDIA H100", "pci_bus_id": "",
        "Hostname": "node-1", "DCGM_FI_DRIVER_VERSION": "580.1",
        "DCGM_FI_DEV_VBIOS_VERSION": "96.00.1",
    }  # fmt: skip
    assert value(got, "DCGM_FI_PROF_SM_ACTIVE", **labels) == 0.5
    assert value(got, "DCGM_FI_PROF_SM_OCCUPANCY", **labels) == 0.25
    assert value(got, "DCGM_FI_PROF_PIPE_FP16_ACTIVE", **labels) == 0.125
    assert value(got, "DCGM_FI_PROF_NVLINK_TX_BYTES", **labels) == 3e9
    assert value(got, "DCGM_FI_DEV_GPU_UTIL", **labels) == 37
    # A counter listed as gauge is served as written (typed gauge), in mJ.
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION gauge" in text
    assert value(got, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **labels) == 12500
    # The file's help, the first of a field listed twice.
    assert "# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has" in text
    assert text.count("# TYPE DCGM_FI_PROF_SM_ACTIVE ") == 1
    # Only the file's fields: the defaults it does not list are not served.
    assert "DCGM_FI_DEV_SM_CLOCK" not in text
    # The field it cannot serve is named once, as a reading of our own family.
    unserved = [r.labels for r in compat_readings(compat) if r.metric == UNSERVED]
    assert unserved == [("dcgm", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "not among our readings")]


def test_a_type_that_contradicts_the_field_is_noted_once():
    selection = select(parse(CSV, "custom.csv"))
    assert [f for f, _ in selection.notes] == ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert [f for f, _, _ in selection.fields].count("DCGM_FI_PROF_SM_ACTIVE") == 1


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("DCGM_FI_DEV_GPU_UTIL, gauge, ok.\nDCGM_FI_DEV_GPU_TEMP, gauge\n", 2, "expected 3 fields"),
        ("# c\n\nDCGM_FI_DEV_GPU_UTIL, gaug, typo.\n", 3, "unknown Prometheus type 'gaug'"),
    ],
)
def test_malformed_csv_names_file_and_line(text, line, what):
    with pytest.raises(CsvError) as err:
        parse(text, "/etc/dcgm-exporter/custom.csv")
    assert str(err.value).startswith(f"/etc/dcgm-exporter/custom.csv:{line}: ")
    assert what in str(err.value)


def test_malformed_csv_at_start_is_a_config_error_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("DCGM_FI_DEV_GPU_UTIL, gauge\n")
    with pytest.raises(ConfigError) as err:
        load_config(
            env={
                "ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__COMPAT": "dcgm",
                "ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__COMPAT_FIELDS": f'{{"dcgm": "{path}"}}',
            }
        )
    assert "compat_fields.dcgm" in str(err.value) and f"{path}:1:" in str(err.value)


def test_4_10_names_in_a_custom_csv(tmp_path):
    selection = select(parse("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND, gauge, x.\n", "c.csv"))
    compat = Compat(("dcgm@4.10",), "node-1", dcgm_fields=selection)
    got = samples(render(_store(), compat))
    found = [v for (n, _), v in got.items() if n == "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND"]
    assert found == [3e9]


def test_an_unknown_peer_in_compat_fields_is_a_config_error(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, x.\n")
    with pytest.raises(ConfigError) as err:
        load_config(
            env={"ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__COMPAT_FIELDS": f'{{"nv": "{path}"}}'}
        )
    assert "compat_fields.nv" in str(err.value)


def test_unservable_rows_are_named_once_with_their_reason():
    text = (
        "DCGM_FI_DEV_FABRIC_CLUSTER_UUID, label, cluster.\n"
        "DCGM_FI_DEV_GPU_UTIL, histogram, odd.\n"
        "NOT_A_FIELD, gauge, x.\n"
        "NOT_A_FIELD, gauge, x.\n"
    )
    selection = select(parse(text, "c.csv"))
    assert selection.fields == () and selection.labels == ()
    assert selection.unserved == (
        ("DCGM_FI_DEV_FABRIC_CLUSTER_UUID", "a label field we do not read"),
        ("DCGM_FI_DEV_GPU_UTIL", "type histogram: a DCGM field is one value per device"),
        ("NOT_A_FIELD", "not a DCGM field"),
    )


def test_base_unit_names_in_a_custom_csv():
    # DCGM's base-unit field ids (go-dcgm 1603, 1611) listed by a site: served in Hz and J.
    text = (
        "DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock (in Hz).\n"
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, Energy (in J).\n"
    )
    selection = select(parse(text, "c.csv"))
    assert selection.unserved == () and selection.notes == ()
    out = render(_store(), Compat(("dcgm@4.10",), "node-1", dcgm_fields=selection))
    got = samples(out)
    assert [v for (n, _), v in got.items() if n == "DCGM_FI_DEV_SM_CLOCK_HERTZ"] == [1.755e9]
    energy = [x for x in out.splitlines() if x.startswith("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{")]
    assert [float(x.rsplit(" ", 1)[1]) for x in energy] == [12.5]
    assert "# HELP DCGM_FI_DEV_SM_CLOCK_HERTZ SM clock (in Hz)." in out
