"""gpu-validate's comparisons: exact where static, bracketed within a tolerance where
the quantity moves, absent on both sides where nvidia-smi prints [N/A]."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.catalog import CATALOG
from scripts.gpuvalidate.compare import (
    FIELDS,
    Check,
    choose,
    combine,
    compare,
    compare_round,
    exporter_value,
)
from scripts.gpuvalidate.expo import parse
from scripts.gpuvalidate.smi import cell, parse_csv

U = "GPU-5d0b8c7e-1d2f-3a4b-5c6d-7e8f90a1b2c3"
FIELD = {f.key: f for f in FIELDS}


def exposition(uuid: str = U, **values: float) -> str:
    """A /metrics page for one GPU; ``values`` override the defaults by short name."""
    v = {
        "power": 312.456,
        "total": 85520809984,
        "used": 1073741824,
        "util": 0.37,
        "clock_sm": 1755e6,
        "limit": 700.0,
        "pstate": 0,
        "sw_power_cap": 1,
        **values,
    }
    ident = f'device="0",uuid="{uuid}"'
    return "\n".join(
        [
            f'accel_device_info{{{ident},vendor="nvidia",model="NVIDIA H100 80GB HBM3",'
            f'pci_bus_id="00000000:18:00.0",serial="",vbios="96.00.99.00.01",'
            f'driver_version="580.82.07",cuda_driver_version="12.8",mig_mode="disabled"}} 1',
            'accel_devices{vendor="nvidia"} 1',
            f"accel_power_watts{{{ident}}} {v['power']}",
            f"accel_power_limit_watts{{{ident}}} {v['limit']}",
            f"accel_memory_total_bytes{{{ident}}} {v['total']}",
            f"accel_memory_used_bytes{{{ident}}} {v['used']}",
            f"accel_utilization_ratio{{{ident}}} {v['util']}",
            f'accel_clock_hertz{{{ident},clock="sm"}} {v["clock_sm"]}',
            f"accel_performance_state{{{ident}}} {v['pstate']}",
            f'accel_clock_throttle_active{{{ident},reason="sw_power_cap"}} {v["sw_power_cap"]}',
            f'accel_ecc_errors_total{{{ident},type="corrected",counter="volatile"}} 3',
            "",
        ]
    )


def one_check(key: str, text: str, before: str, after: str | None = None) -> Check:
    f = FIELD[key]
    seen = [exporter_value(f, parse(page), U) for page in (before, after or before)]
    return compare(f, cell(text), seen, U)


def test_static_values_agree_to_the_last_digit_nvidia_smi_prints():
    page = exposition()
    assert one_check("memory.total", "81559", page).verdict == "pass"  # bytes floored to MiB
    assert one_check("memory.total", "81558", page).verdict == "fail"
    assert one_check("enforced.power.limit", "700.00", page).verdict == "pass"
    assert one_check("enforced.power.limit", "700.02", page).verdict == "fail"
    assert one_check("name", "NVIDIA H100 80GB HBM3", page).verdict == "pass"
    assert one_check("name", "NVIDIA H200", page).verdict == "fail"
    assert one_check("pci.bus_id", "00000000:18:00.0", page).verdict == "pass"
    assert one_check("mig.mode.current", "Disabled", page).verdict == "pass"
    assert one_check("driver_version", "580.82.07", page).verdict == "pass"
    assert one_check("count", "1", page).verdict == "pass"
    assert one_check("ecc.mode.current", "Enabled", page).verdict == "pass"
    assert one_check("ecc.mode.current", "Disabled", page).verdict == "fail"


def test_na_must_be_absent_and_a_value_must_be_present():
    page = exposition()
    # serial="" on the exporter side is "no serial": agrees with [N/A].
    check = one_check("serial", "[N/A]", page)
    assert check.verdict == "pass" and check.note == "absent on both sides"
    assert one_check("serial", "1654922001234", page).verdict == "fail"
    assert one_check("fan.speed", "[Not Supported]", page).verdict == "pass"
    # nvidia-smi has a value the exporter lacks.
    missing = one_check("fan.speed", "40", page)
    assert missing.verdict == "fail" and "no accel_fan_speed_ratio" in missing.note
    # The exporter exports what nvidia-smi calls not available.
    extra = one_check("power.draw", "[N/A]", page)
    assert extra.verdict == "fail" and "[N/A]" in extra.note


def test_moving_values_are_bracketed_by_the_two_scrapes_within_the_tolerance():
    before, after = exposition(power=300.0), exposition(power=340.0)
    assert one_check("power.draw", "320.00", before, after).verdict == "pass"
    # 15 W or 10 % (the larger) beyond the bracket still passes, further does not.
    assert one_check("power.draw", "370.00", before, after).verdict == "pass"
    far = one_check("power.draw", "390.00", before, after)
    assert far.verdict == "fail" and "outside" in far.note
    # A unit slip (mW read as W, a ratio as percent) never passes.
    assert one_check("utilization.gpu", "37", exposition()).verdict == "pass"
    assert one_check("utilization.gpu", "37", exposition(util=37)).verdict == "fail"
    assert one_check("clocks.current.sm", "1755", exposition()).verdict == "pass"
    assert one_check("clocks.current.sm", "1755", exposition(clock_sm=1755)).verdict == "fail"
    # Flags and P-states move, exactly.
    assert one_check("clocks_event_reasons.sw_power_cap", "Active", exposition()).verdict == "pass"
    assert (
        one_check("clocks_event_reasons.sw_power_cap", "Not Active", exposition()).verdict == "fail"
    )
    changed = exposition(sw_power_cap=0)
    assert (
        one_check("clocks_event_reasons.sw_power_cap", "Not Active", exposition(), changed).verdict
        == "pass"
    )
    assert one_check("pstate", "P0", exposition()).verdict == "pass"
    assert one_check("pstate", "P2", exposition()).verdict == "fail"
    assert FIELD["power.draw"].tolerance() == (
        "between the two scrapes, widened by ±15 or ±10% (the larger)"
    )


def test_unreadable_nvidia_smi_text_is_a_failure_not_a_crash():
    check = one_check("power.draw", "lots", exposition())
    assert check.verdict == "fail" and "cannot read" in check.note


def test_a_round_matches_gpus_by_uuid_and_flags_either_side_missing():
    names = choose(FIELDS, None)
    query = ["uuid", "memory.total", "power.draw"]
    rows = parse_csv(f"{U}, 81559, 312.46\nGPU-other, 81559, 100.00\n", query)
    page = parse(exposition())
    checks = compare_round(FIELDS, {k: v for k, v in names.items() if v in query}, rows, page, page)
    by = {(c.name, c.uuid): c for c in checks}
    assert by[("uuid", U)].verdict == "pass"
    assert by[("memory.total", U)].verdict == "pass"
    assert by[("power.draw", U)].verdict == "pass"
    assert by[("uuid", "GPU-other")].verdict == "fail"
    assert by[("uuid", "GPU-other")].note == "not exported"
    # A field the query did not carry is a skip with the reason, not a pass.
    assert by[("temperature.gpu", U)].verdict == "skip"
    # A GPU the exporter has and nvidia-smi lacks.
    checks = compare_round(FIELDS, {}, [], page, page)
    assert [(c.uuid, c.verdict, c.note) for c in checks] == [
        (U, "fail", "nvidia-smi does not list it")
    ]


@pytest.mark.parametrize(
    ("key", "verdicts", "expected"),
    [
        ("power.draw", ["pass", "fail", "pass"], "pass"),  # moving: most rounds
        ("power.draw", ["fail", "fail", "pass"], "fail"),
        ("memory.total", ["pass", "fail", "pass"], "fail"),  # static: every round
        ("memory.total", ["pass", "pass", "pass"], "pass"),
        ("memory.total", ["skip", "skip", "skip"], "skip"),
    ],
)
def test_combine_rounds(key, verdicts, expected):
    rounds = [[Check(key, U, v, note=f"round {i}")] for i, v in enumerate(verdicts)]
    (merged,) = combine(rounds, FIELDS)
    assert merged.verdict == expected
    if "fail" in verdicts:
        assert "last disagreement: round" in merged.note


def test_every_field_maps_to_a_catalog_family_with_its_labels():
    rows = CATALOG
    for f in FIELDS:
        assert f.family in rows, f.family
        labels = set(rows[f.family].labels)
        assert {k for k, _ in f.labels} <= labels, f.key
        if f.read == "label":
            assert f.label in labels, f.key


# Families another change is adding (GPM activity): the load phase tolerates their absence.
OPTIONAL = {"accel_sm_active_ratio", "accel_pipe_active_ratio"}


def test_every_family_the_kit_reads_is_in_the_catalog():
    kit = Path(__file__).parents[2] / "scripts" / "gpuvalidate"
    used = set()
    for path in kit.glob("*.py"):
        used |= set(re.findall(r'"(accel_[a-z0-9_]*[a-z0-9])"', path.read_text()))
    assert len(used) > 20
    for name in used - OPTIONAL:
        family = re.sub(r"_(count|sum|bucket)$", "", name) if name not in CATALOG else name
        assert family in CATALOG, name


def expand(token: str) -> list[str]:
    """``a.{b,c}.{d,e}`` -> the four names it abbreviates."""
    parts = re.split(r"\{([^}]*)\}", token)
    names = [""]
    for n, part in enumerate(parts):
        options = [o.strip() for o in part.split(",")] if n % 2 else [part]
        names = [name + option for name in names for option in options]
    return names


def test_every_field_is_documented():
    doc = (Path(__file__).parents[2] / "docs" / "gpu-validation.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    named = {
        name for row in rows for token in re.findall(r"`([^`]+)`", row) for name in expand(token)
    }
    for f in FIELDS:
        assert f.key in named, f.key
        assert f"`{f.family}" in doc, f.family
