"""gpu-validate's reading of nvidia-smi: the fields it offers, CSV cells, units, N/A."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scripts.gpuvalidate.compare import FIELDS, choose
from scripts.gpuvalidate.smi import Smi, SmiError, cell, offered, parse_csv

HELP = (
    Path(__file__).parents[1] / "fixtures" / "nvidia_smi" / "help-query-gpu-580.txt"
).read_text()

# An H100 SXM on driver 580, as `--format=csv,noheader,nounits` prints it.
QUERY = [
    "uuid",
    "name",
    "serial",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "power.draw",
    "enforced.power.limit",
    "temperature.memory",
    "fan.speed",
    "pstate",
    "clocks_event_reasons.sw_power_cap",
    "ecc.mode.current",
    "retired_pages.single_bit_ecc.count",
    "clocks.current.sm",
]
ROWS = (
    "GPU-5d0b8c7e-1d2f-3a4b-5c6d-7e8f90a1b2c3, NVIDIA H100 80GB HBM3, 1654922001234, "
    "00000000:18:00.0, 81559, 0, 71.93, 700.00, 34, [N/A], P0, Not Active, Enabled, "
    "[Not Supported], 1980\n"
    "GPU-00000000-1d2f-3a4b-5c6d-7e8f90a1b2c4, NVIDIA H100 80GB HBM3, [N/A], "
    "00000000:2A:00.0, 81559, 512, 312.46, 700.00, [Unknown Error], [N/A], P2, Active, "
    "Disabled, 0, 345\n"
)


def test_offered_reads_names_and_aliases_and_ignores_descriptions():
    names = offered(HELP)
    assert {"uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id", "memory.reserved"} <= names
    assert {"clocks_event_reasons.gpu_idle", "clocks_throttle_reasons.gpu_idle"} <= names
    # Quoted words inside descriptions are not fields.
    assert "Not Active" not in names and "domain:bus:device.function" not in names


def test_choose_takes_the_newest_name_offered_and_falls_back_to_aliases():
    names = choose(FIELDS, offered(HELP))
    assert names["clocks_event_reasons.gpu_idle"] == "clocks_event_reasons.gpu_idle"
    assert names["clocks.current.graphics"] == "clocks.current.graphics"
    assert names["remapped_rows.correctable"] is None  # not in this help excerpt
    old = offered('"clocks_throttle_reasons.sw_power_cap"\nThe old name.\n"power.limit"\n')
    names = choose(FIELDS, old)
    assert names["clocks_event_reasons.sw_power_cap"] == "clocks_throttle_reasons.sw_power_cap"
    assert names["enforced.power.limit"] == "power.limit"
    # Without a help text every field is asked for by its newest name.
    assert choose(FIELDS, None)["enforced.power.limit"] == "enforced.power.limit"


def test_parse_csv_values_and_absent_cells():
    rows = parse_csv(ROWS, QUERY)
    assert len(rows) == 2
    first, second = rows
    assert first["memory.total"].number() == 81559 and first["memory.total"].resolution() == 1
    assert first["power.draw"].number() == pytest.approx(71.93)
    assert first["power.draw"].resolution() == pytest.approx(0.01)
    assert first["pstate"].pstate() == 0 and second["pstate"].pstate() == 2
    assert first["clocks_event_reasons.sw_power_cap"].flag() == 0
    assert second["clocks_event_reasons.sw_power_cap"].flag() == 1
    assert first["ecc.mode.current"].flag() == 1 and second["ecc.mode.current"].flag() == 0
    assert first["fan.speed"].absent == "N/A" and not first["fan.speed"].present
    assert first["retired_pages.single_bit_ecc.count"].absent == "Not Supported"
    assert second["serial"].absent == "N/A"
    assert second["temperature.memory"].absent == "Unknown Error"
    assert first["pci.bus_id"].text == "00000000:18:00.0"
    assert first["name"].text == "NVIDIA H100 80GB HBM3"


def test_cells_with_units_bare_na_and_nonsense():
    assert cell("700.00 W").number() == 700.0
    assert cell("81559 MiB").number() == 81559
    assert cell("45 %").resolution() == 1
    assert cell("N/A").absent == "N/A"
    assert cell("Yes").flag() == 1 and cell("No").flag() == 0 and cell("1").flag() == 1
    with pytest.raises(ValueError):
        cell("Active").number()
    with pytest.raises(ValueError):
        cell("12").pstate()
    with pytest.raises(ValueError):
        cell("maybe").flag()


def test_a_row_of_the_wrong_width_is_an_error():
    with pytest.raises(SmiError, match="line 1 has 3 cells for 2 fields"):
        parse_csv("a, b, c\n", ["uuid", "name"])


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_smi_runs_the_query_and_reports_failures(tmp_path):
    smi = Smi(_script(tmp_path, 'echo "$@" > "$0.args"\nprintf "GPU-1, 34\\n"\n'))
    result = smi.query(["uuid", "temperature.gpu"])
    assert result.rows[0]["temperature.gpu"].number() == 34
    assert (tmp_path / "nvidia-smi.args").read_text().split() == [
        "--query-gpu=uuid,temperature.gpu",
        "--format=csv,noheader,nounits",
    ]
    failing = Smi(_script(tmp_path, 'echo "NVIDIA-SMI has failed"; exit 9\n'))
    with pytest.raises(SmiError, match="exited 9: NVIDIA-SMI has failed"):
        failing.query(["uuid"])
    with pytest.raises(SmiError):
        Smi(os.fspath(tmp_path / "absent")).offered()
    hung = Smi(_script(tmp_path, "exec sleep 30\n"), timeout=0.5)
    with pytest.raises(SmiError, match="timed out"):
        hung.query(["uuid"])


def test_a_field_nvidia_smi_refuses_costs_only_that_field(tmp_path):
    smi = Smi(
        _script(
            tmp_path,
            'case "$1" in *bad.field*) echo "Field \\"bad.field\\" is not a valid field to query."; exit 2;; esac\n'
            'echo "$1" | tr -cd , | sed "s/,/x, /g; s/$/x/"\n',
        )
    )
    ok, refused = smi.usable(["uuid", "bad.field", "power.draw"])
    assert ok == ["uuid", "power.draw"]
    assert list(refused) == ["bad.field"] and "not a valid field" in refused["bad.field"]
    assert smi.usable(["uuid", "power.draw"]) == (["uuid", "power.draw"], {})
