"""Pure helpers of the amdsmi backend: N/A handling, unit tables, status names, catalog rows."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from exporter.backends import amdsmi_events, amdsmi_fields
from exporter.backends.amdsmi_fields import U16_MAX, U32_MAX, U64_MAX, number, pcie_generation
from exporter.catalog import amd
from exporter.catalog.device import ID
from exporter.catalog.vocabulary import AmdEvent
from exporter.config import load_config
from exporter.config.devices import AmdSmiSourceConfig
from exporter.errors import ConfigError


@pytest.mark.parametrize(
    ("raw", "sentinels", "want"),
    [
        (42, (U16_MAX,), 42.0),
        (0, (U16_MAX,), 0.0),
        (U16_MAX, (U16_MAX,), None),
        (U64_MAX, (U16_MAX, U64_MAX), None),
        (U16_MAX, (U32_MAX,), float(U16_MAX)),  # only the field's own sentinel is N/A
        ("N/A", (), None),
        (True, (), None),
        (None, (), None),
        (15.258999824523926, (), 15.258999824523926),
        (float("inf"), (), None),
        (float("nan"), (), None),
        (10**400, (), None),  # no device counter is that wide; float() would overflow
    ],
)
def test_number(raw: object, sentinels: tuple[int, ...], want: float | None) -> None:
    assert number(raw, *sentinels) == want


@pytest.mark.parametrize(
    ("rate", "gen"),
    [
        *((mts, g) for mts, g in ((2500, 1), (8000, 3), (16000, 4), (32000, 5), (64000, 6))),
        # GT/s, as some amdsmi builds (the SR-IOV host library) report it
        (8, 3),
        (16, 4),
        (32, 5),
        (1234, None),
        (2, None),  # 2.5 GT/s truncated: ambiguous, not guessed
        (None, None),
    ],
)
def test_pcie_generation_from_transfer_rate(rate: float | None, gen: int | None) -> None:
    assert pcie_generation(rate) == (None if gen is None else float(gen))


@pytest.mark.parametrize(
    ("static", "gen"),
    [
        ({"pcie_interface_version": 5, "max_pcie_speed": 32000}, 5.0),
        ({"pcie_interface_version": 5, "max_pcie_speed": 32}, 5.0),  # GT/s build
        ({"max_pcie_interface_version": 6, "pcie_interface_version": 5}, 6.0),
        ({"pcie_interface_version": "N/A", "max_pcie_speed": 16000}, 4.0),
        ({"pcie_interface_version": 0, "max_pcie_speed": 16}, 4.0),  # 0: not known
        ({"pcie_interface_version": U32_MAX, "max_pcie_speed": "N/A"}, None),
    ],
)
def test_pcie_max_generation_prefers_the_stated_interface_version(
    static: dict[str, object], gen: float | None
) -> None:
    assert amdsmi_fields.pcie_max_generation(static) == gen


def test_status_names() -> None:
    names = {10: "AMDSMI_STATUS_NO_PERM", 34: "AMDSMI_STATUS_DRIVER_NOT_LOADED"}
    assert amdsmi_fields.status_name(names, 10) == "no_perm"
    assert amdsmi_fields.status_name(names, 34) == "driver_not_loaded"
    assert amdsmi_fields.status_name(names, 99) == "status_99"
    assert "driver_not_loaded" in amdsmi_fields.LOST
    assert "not_supported" in amdsmi_fields.UNSUPPORTED
    assert not amdsmi_fields.LOST & amdsmi_fields.UNSUPPORTED


def test_configurable_event_types_are_exactly_the_labelled_ones() -> None:
    allowed = set(typing.get_args(AmdEvent))
    assert allowed == set(amdsmi_events.EVENT_LABELS.values())
    default = AmdSmiSourceConfig().event_types
    assert set(default) <= allowed


def test_amd_rows_carry_identity_plus_bounded_dimensions() -> None:
    # Two dimensions only where both are bounded and needed together: an AFID by
    # record severity, a throttle reason per XCP, a limit per sensor.
    two = {
        "accel_amd_afid_errors_total",
        "accel_amd_violation_residency_total",
        "accel_amd_temperature_limit_celsius",
    }
    # An info family whose labels past the first are what the table says of that one
    # key: one series per AFID counted, however many labels describe it.
    described = {"accel_amd_afid_info"}
    for row in amd.ROWS:
        assert row.name.startswith("accel_amd_")
        assert row.labels[:2] == ID
        if row.name in described:
            assert row.kind.value == "info" and row.labels[2] == "afid"
            continue
        assert len(row.labels) <= (4 if row.name in two else 3), row.name


def test_event_types_config_names_the_key_of_a_bad_value(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sources:\n  amdsmi:\n    event_types: [vmfault, page_fault_start]\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), env={})
    assert "sources.amdsmi.event_types" in str(info.value)
    assert "page_fault_start" in str(info.value)
    good = load_config(
        None, env={"ACCEL_EXPORTER_SOURCES__AMDSMI__EVENT_TYPES": "[gpu_post_reset]"}
    )
    assert good.sources.amdsmi.event_types == ["gpu_post_reset"]


def test_every_amdsmi_function_the_backend_calls_is_resolved_at_bootstrap() -> None:
    # A function called by name without being in FUNCTIONS would escape the
    # binding's stand-ins: on a package that lacks it, a whole poll would fail.
    import re

    from exporter.backends.amdsmi_binding import FUNCTIONS

    called: set[str] = set()
    for module in ("amdsmi.py", "amdsmi_fields.py", "amdsmi_events.py", "amdsmi_ras.py"):
        text = (Path(amdsmi_fields.__file__).parent / module).read_text()
        called |= set(re.findall(r"api\.(amdsmi_\w+)", text))
    called -= {"amdsmi_wrapper"}  # the ctypes module: status names and constants
    assert called - set(FUNCTIONS) == set()
    assert len(called) > 25
