"""AMD's AFID table as data, and the advice each AFID gets (exporter/afids.py, actions.py).

The rows are checked against AMD's own decoder table (ROCm/amdsmi error_map.c @ 4bc305a6,
AFID_VERSION 0.7) and the MI450 rule (addc-base mi450_gpu_afid.hpp @ bfb078ee) as
shared/reference/afid-table.md quotes them.
"""

from __future__ import annotations

import pytest

from exporter import actions, afids
from exporter.actions import Advice
from exporter.catalog.vocabulary import AFID_TABLE_SEVERITIES

# AMD's words for each severity, as error_map.c writes them.
AMD = {v: k for k, v in afids.AMD_SEVERITY.items()}


@pytest.mark.parametrize(
    ("afid", "category", "kind", "severity"),
    [
        (1, "Boot-Time Errors", "FW Load", "Fail-to-init"),
        (10, "Boot-Time Errors", "XGMI Link Training", "Fail-to-init"),
        (13, "Off-Package Link Errors", "PCIe AER", "Corrected"),
        (18, "Off-Package Link Errors", "XGMI", "Fatal"),
        (19, "HBM Errors", "Bad Page Retirement Threshold", "Fatal"),
        (22, "HBM Errors", "On-die ECC", "Uncorrected, Non-fatal"),
        (24, "HBM Errors", "All", "Corrected"),
        (26, "Device Internal Errors", "Hardware Assertion (HWA)", "Fatal"),
        (27, "Device Internal Errors", "Watchdog Timeout (WDT)", "Fatal"),
        (30, "Device Internal Errors", "All Others", "Fatal"),
        (33, "CPER Format", "Invalid ACA Data", "ALL"),
        (34, "Unidentified Errors", "Unidentified Error", "ALL"),
    ],
)
def test_mi300_rows_are_amds_decoder_table(afid, category, kind, severity):
    got = afids.describe(str(afid))
    assert (got.category, got.type, got.severity) == (category, kind, AMD[severity])
    assert got.source.startswith("ROCm/amdsmi src/aca-decode/error_map.c @ 4bc305a6")


def test_every_mi300_row_is_there_and_the_unclassified_ones_say_so():
    rows = afids.rows()
    assert [r.afid for r in rows] == [*range(1, 35), 16999]
    unclassified = {r.afid for r in rows if r.classified == "false"}
    assert unclassified == {31, 32, 33, 34, 16999}
    assert all(r.classified == "true" for r in rows if r.afid not in unclassified)
    assert afids.describe("16999").source.startswith("addc-base 3.3.0 include/addc/lib_c.h")
    assert set(afids.TABLE_SEVERITIES) == set(AFID_TABLE_SEVERITIES)
    assert {r.severity for r in rows} <= set(AFID_TABLE_SEVERITIES)


def test_mi450_numbers_are_bank_base_plus_severity_plus_error_code():
    umc_fatal = afids.describe(40769 + 128 + 0)
    assert (umc_fatal.bank, umc_fatal.severity, umc_fatal.type) == (
        "umc",
        "fatal",
        "error code 0x0",
    )
    assert umc_fatal.category == "MI450-class GPU bank umc"
    assert umc_fatal.analog == 20  # on-die ECC, as addc's MI300 rule names it
    assert umc_fatal.source.startswith("addc-base 3.3.0 src/addc-mca/mi450_gpu_afid.hpp")
    # The severity is (afid - base) // 64, for every bank; the error code the rest.
    for base, (hw_id, mca_type, name) in afids.MI450_BANKS.items():
        for offset, severity in ((0, "non_fatal_corrected"), (64 + 5, "non_fatal_uncorrected")):
            got = afids.describe(base + offset)
            assert got.severity == severity and got.classified == "true"
            assert got.bank == (name or f"hw_id 0x{hw_id:X}/mca_type {mca_type}")
        assert afids.describe(base + 128 + 63).severity == "fatal"
    xgmi = afids.describe(43329 + 128 + 3)
    assert (xgmi.bank, xgmi.analog) == ("pcs_xgmi", 18)
    assert afids.describe(40257 + 128 + 5).analog == 27  # pie WDT
    assert afids.describe(40001 + 128 + 0x11).analog == 26  # cs hardware assertion


@pytest.mark.parametrize("afid", ["40000", "40193", "40200", "46849", "59999", "35", "99", "x"])
def test_a_number_no_table_names_is_unknown(afid):
    got = afids.describe(afid)
    assert (got.severity, got.classified, got.known) == ("unknown", "unknown", False)
    advice = actions.afid_action(afid)
    assert (advice.action, advice.provenance) == ("service", "unknown_code")
    assert f"AFID {afid}" in advice.detail  # the code kept


# The brief's rows: action, scope, escalation, escalation scope, provenance.
ROWS = [
    ("13", "none", "device", "", "", "exporter_rule"),
    ("18", "inspect_hardware", "baseboard", "replace_device", "baseboard", "vendor_inferred"),
    ("16", "inspect_hardware", "baseboard", "replace_device", "baseboard", "vendor_inferred"),
    ("14", "inspect_hardware", "baseboard", "replace_device", "baseboard", "vendor_inferred"),
    ("19", "replace_device", "device", "", "", "vendor_inferred"),
    ("20", "replace_device", "device", "", "", "vendor_inferred"),
    ("21", "replace_device", "device", "", "", "vendor_inferred"),
    ("22", "none", "device", "reboot_node", "node", "exporter_rule"),
    ("24", "none", "device", "", "", "exporter_rule"),
    ("25", "reboot_node", "node", "replace_device", "device", "vendor_inferred"),
    ("26", "reboot_node", "node", "replace_device", "device", "vendor_inferred"),
    ("27", "reboot_node", "node", "replace_device", "device", "vendor_inferred"),
    ("30", "replace_device", "device", "", "", "vendor_inferred"),
    ("4", "reboot_node", "node", "replace_device", "device", "vendor_inferred"),
    ("32", "contact_vendor", "device", "", "", "vendor_inferred"),
    ("34", "reboot_node", "node", "contact_vendor", "device", "vendor_inferred"),
    ("16999", "reboot_node", "node", "contact_vendor", "device", "vendor_inferred"),
    (str(40769 + 128), "replace_device", "device", "", "", "vendor_inferred"),
    (str(40769), "none", "device", "", "", "exporter_rule"),
    (
        str(43329 + 128),
        "inspect_hardware",
        "baseboard",
        "replace_device",
        "baseboard",
        "vendor_inferred",
    ),
]


@pytest.mark.parametrize(("afid", "action", "scope", "escalation", "esc_scope", "provenance"), ROWS)
def test_each_afid_asks_what_the_table_says(afid, action, scope, escalation, esc_scope, provenance):
    got = actions.afid_action(afid)
    assert (got.action, got.scope, got.escalation, got.escalation_scope, got.provenance) == (
        action,
        scope,
        escalation,
        esc_scope,
        provenance,
    )
    assert got.detail and got.reference


def test_the_guides_words_are_in_the_detail_and_the_condition_in_the_reference():
    xgmi = actions.afid_action("18")
    assert xgmi.detail.startswith("reseat the GPU tray")
    assert "RMA the UBB" in xgmi.detail
    assert "AMDGPUXgmi" in xgmi.reference and "e1b65568" in xgmi.reference
    assert "(inferred)" in xgmi.reference
    assert "agfhc -t pcie_link_status" in actions.afid_action("14").detail
    assert actions.afid_action("20").detail.startswith("RMA the GPU (OAM)")
    mi450 = actions.afid_action(str(40769 + 128))
    assert "as MI300 AFID 20" in mi450.reference and "AMDGPUOnDieEcc" in mi450.reference


def test_every_built_in_advice_speaks_the_vocabulary():
    codes = [*range(1, 35), 16999, *(b + o for b in afids.MI450_BANKS for o in (0, 64, 128, 191))]
    for code in codes:
        for repeated in (False, True):
            got = actions.afid_action(str(code), repeated=repeated)
            assert got.action in actions.ACTIONS, code
            assert got.scope in actions.SCOPES, code
            assert got.escalation in ("", *actions.ACTIONS), code
            assert got.escalation_scope in ("", *actions.SCOPES), code
            assert got.provenance in actions.PROVENANCES, code


def test_a_repeated_non_fatal_afid_escalates_and_a_fatal_one_stays():
    once, again = actions.afid_action("22"), actions.afid_action("22", repeated=True)
    assert (once.action, again.action, again.scope) == ("none", "reboot_node", "node")
    assert (again.escalation, again.escalation_scope) == ("replace_device", "device")
    assert actions.afid_action("28", repeated=True).escalation == ""  # none named
    assert actions.afid_action("24", repeated=True) == actions.afid_action("24")
    assert actions.afid_action("19", repeated=True) == actions.afid_action("19")


def test_severity_is_the_tables_and_the_records_only_where_it_names_none():
    assert afids.severity("24", "fatal") == "non_fatal_corrected"
    assert afids.severity("30", "non_fatal_corrected") == "fatal"
    assert afids.severity("34", "fatal") == "fatal"
    assert afids.severity("99", "non_fatal_uncorrected") == "non_fatal_uncorrected"
    assert afids.severity("99", "") == "unknown"


def test_overrides_win_and_a_site_table_replaces_the_inferred_join():
    assert actions.afid_action("24", {"24": "reboot_node"}).provenance == "config"
    given = Advice("inspect_hardware", "baseboard", provenance="config")
    assert actions.afid_action("19", {"19": given}) == given
    site = {"18": Advice("replace_device", "baseboard", provenance="site_table")}
    assert actions.afid_action("18", site=site) == site["18"]
    # A fatal AFID the site table does not name: no inferred row, an unknown code.
    missing = actions.afid_action("20", site=site)
    assert (missing.action, missing.provenance) == ("service", "unknown_code")
    assert "AFID 20" in missing.detail and "site table" in missing.detail
    # The exporter's own rule (corrected, non-fatal) is no inference: it stays.
    assert actions.afid_action("24", site=site).provenance == "exporter_rule"
    # The config beats the site table.
    assert actions.afid_action("18", {"18": "none"}, site).action == "none"
