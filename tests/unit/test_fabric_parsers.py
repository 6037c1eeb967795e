"""The fabric's sysfs parsers on the kernel's own text, and on text it never writes."""

from __future__ import annotations

import pytest

from exporter.host.infiniband import (
    parse_counter,
    parse_enum,
    parse_guid,
    parse_numa_node,
    parse_rate,
)
from exporter.host.pcie import PciLink, bridges_of, parse_aer, parse_speed, parse_width, switch_of
from exporter.host.sysfs_read import ParseError
from tests.fakes.fabric_sysfs import COR_LINES, UNCOR_LINES, aer_text


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("4: ACTIVE\n", (4, "ACTIVE")),
        ("1: DOWN", (1, "DOWN")),
        ("5: ACTIVE_DEFER", (5, "ACTIVE_DEFER")),
        ("5: LinkUp", (5, "LinkUp")),
        ("4: PortConfigurationTraining", (4, "PortConfigurationTraining")),
        ("7: Phy Test", (7, "Phy Test")),
    ],
)
def test_port_states_as_the_kernel_writes_them(text, want):
    assert parse_enum(text) == want


@pytest.mark.parametrize("text", ["", "ACTIVE", "4 ACTIVE", ": ACTIVE", "4:", "x: ACTIVE"])
def test_a_state_without_its_number_is_refused(text):
    with pytest.raises(ParseError):
        parse_enum(text)


@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("200 Gb/sec (4X HDR)\n", 200_000_000_000),
        ("400 Gb/sec (4X NDR)", 400_000_000_000),
        ("100 Gb/sec (2X HDR)", 100_000_000_000),
        ("25 Gb/sec (1X EDR)", 25_000_000_000),
        ("2.5 Gb/sec (1X SDR)", 2_500_000_000),
        ("10 Gb/sec (4X)", 10_000_000_000),  # SDR as older kernels print it
        ("40 Gb/sec", 40_000_000_000),
    ],
)
def test_rates_in_bits_per_second(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["", "200", "200 GB/s", "fast Gb/sec", "-5 Gb/sec (1X)"])
def test_a_rate_not_in_the_kernel_format_is_refused(text):
    with pytest.raises(ParseError):
        parse_rate(text)


def test_counters_and_the_no_pma_answer():
    assert parse_counter("18446744073709551615\n") == 2**64 - 1
    assert parse_counter("0") == 0
    # A device without a performance-management agent has no counter, not a zero one.
    assert parse_counter("N/A (no PMA)\n") is None


@pytest.mark.parametrize("text", ["", "-1", "12abc", "0x10", "1.5", "N/A"])
def test_a_counter_that_is_not_a_count_is_refused(text):
    with pytest.raises(ParseError):
        parse_counter(text)


def test_guid_and_numa_node():
    assert parse_guid("0C42:A103:0065:D1A2\n") == "0c42:a103:0065:d1a2"
    assert parse_numa_node("1\n") == 1
    assert parse_numa_node("-1") is None  # the platform names no node
    for bad in ("0c42a1030065d1a2", "0c42:a103:0065", "zz42:a103:0065:d1a2"):
        with pytest.raises(ParseError):
            parse_guid(bad)
    with pytest.raises(ParseError):
        parse_numa_node("node0")


@pytest.mark.parametrize(
    ("text", "transfers"),
    [
        ("32.0 GT/s PCIe\n", 32_000_000_000),
        ("64.0 GT/s PCIe", 64_000_000_000),
        ("2.5 GT/s PCIe", 2_500_000_000),
        ("8 GT/s", 8_000_000_000),  # before the kernel added " PCIe" (5.x)
        ("5.0 GT/s PCIe", 5_000_000_000),
    ],
)
def test_link_speeds_in_transfers_per_second(text, transfers):
    assert parse_speed(text) == transfers


def test_an_unknown_speed_is_no_value_and_garbage_is_refused():
    assert parse_speed("Unknown") is None
    assert parse_speed("Unknown speed") is None
    for bad in ("", "32 Gb/s", "GT/s", "fast"):
        with pytest.raises(ParseError):
            parse_speed(bad)


def test_widths():
    assert parse_width("16\n") == 16
    assert parse_width("0") == 0
    for bad in ("x16", "", "-1", "16 lanes"):
        with pytest.raises(ParseError):
            parse_width(bad)


def test_aer_totals_from_the_kernels_tables():
    assert parse_aer(aer_text(COR_LINES, "TOTAL_ERR_COR", 7), "TOTAL_ERR_COR") == 7
    assert parse_aer(aer_text(UNCOR_LINES, "TOTAL_ERR_FATAL", 0), "TOTAL_ERR_FATAL") == 0
    # The per-type lines are not the total: RxErr 7 and BadTLP 0 sum to the total line.
    text = "RxErr 3\nBadTLP 4\nTOTAL_ERR_COR 7\n"
    assert parse_aer(text, "TOTAL_ERR_COR") == 7


@pytest.mark.parametrize(
    "text", ["", "RxErr 1\n", "TOTAL_ERR_COR\n", "TOTAL_ERR_COR -1\n", "TOTAL_ERR_COR many\n"]
)
def test_an_aer_table_without_a_good_total_is_refused(text):
    with pytest.raises(ParseError):
        parse_aer(text, "TOTAL_ERR_COR")


def test_the_bridge_chain_and_the_switch_from_a_resolved_path():
    path = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    bridges = bridges_of(path)
    assert bridges == ("0000:15:01.0", "0000:16:00.0", "0000:17:00.0")
    assert switch_of(bridges) == "0000:16:00.0"
    # Nested switches: the topmost one under the root port names the switch.
    nested = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0"
    assert switch_of(bridges_of(nested)) == "0000:16:00.0"
    # Right under a root port, or on the root bus: no switch.
    assert switch_of(bridges_of("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")) == ""
    assert bridges_of("/sys/devices/pci0000:00/0000:00:05.0") == ()
    assert bridges_of("/sys/devices/virtual/net/lo") == ()


@pytest.mark.parametrize(
    ("speed", "width", "want"),
    [
        (32e9, 16, ""),
        (32e9, 8, "width"),
        (16e9, 16, "speed"),  # Gen4 on a Gen5 link
        (16e9, 8, "width+speed"),
        (2.5e9, 16, ""),  # an idle GPU parks its link at Gen1: not downtrained
        (2.5e9, 8, "width"),
    ],
)
def test_downtrained_is_fewer_lanes_or_a_speed_above_idle_below_the_maximum(speed, width, want):
    link = PciLink("0000:18:00.0", speed=speed, max_speed=32e9, width=width, max_width=16)
    assert link.downtrained() == want


def test_a_link_with_unread_values_is_not_called_downtrained():
    assert PciLink("0000:18:00.0", width=8).downtrained() == ""
    assert PciLink("0000:18:00.0", speed=16e9).downtrained() == ""
